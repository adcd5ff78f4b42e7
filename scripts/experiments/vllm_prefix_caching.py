"""Does vLLM's prefix caching change the peers comparison? (docs/performance.md,
"vLLM on this CPU" and "Online serving"). Two steps, in two virtualenvs:

    .venv/bin/python scripts/experiments/vllm_prefix_caching.py dump /tmp/peers.json
    /tmp/vllm-venv/bin/python scripts/experiments/vllm_prefix_caching.py run /tmp/peers.json on
    /tmp/vllm-venv/bin/python scripts/experiments/vllm_prefix_caching.py run /tmp/peers.json off
    /tmp/vllm-venv/bin/python scripts/experiments/vllm_prefix_caching.py repeat

`dump` writes the peers workload (the chat prompts as token ids, the output lengths)
with minillm; `run` builds vLLM as the bench's worker does, with prefix caching on or
off, prints its KV block size, warms up on the first 16 prompts as the bench does, and
prints the useful tokens/s of three rounds of the whole workload (the same prompts
every round, as in the bench). `repeat` shows what the serving comparison's blocks of
32 let the cache do: one-token answers to eight fresh 64-token prompts, each sent twice,
timed fresh and repeated. Run it with VLLM_CPU_OMP_THREADS_BIND=0-1
VLLM_CPU_KVCACHE_SPACE=2 HF_HUB_OFFLINE=1, the bench's environment.
"""
import json
import sys
import time
from pathlib import Path


def dump(path: str) -> None:
    from benchmarks.peers import peer_output_lengths, peer_prompts
    from minillm.model.loader import load_model_and_tokenizer
    _, tokenizer = load_model_and_tokenizer("smollm2-135m")
    Path(path).write_text(json.dumps({"prompts": peer_prompts(tokenizer),
                                      "lens": peer_output_lengths()}))


def _vllm(**options):
    """vLLM on minillm's converted SmolLM2 folder, built as the bench's worker builds it."""
    from vllm import LLM
    model = Path.home() / ".cache/minillm/smollm2-135m"
    return LLM(model=str(model), dtype="float32", max_num_seqs=16, max_model_len=2048,
               seed=0, **options)


def run(path: str, prefix_caching: bool) -> None:
    from vllm import SamplingParams
    work = json.loads(Path(path).read_text())
    llm = _vllm(enable_prefix_caching=prefix_caching)
    print("block size", llm.llm_engine.vllm_config.cache_config.block_size, flush=True)

    def tokens_per_s(prompts, lens) -> float:
        params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lens]
        start = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs) / (time.perf_counter() - start)

    tokens_per_s(work["prompts"][:16], [2] * 16)                     # the bench's warm-up
    rounds = [round(tokens_per_s(work["prompts"], work["lens"]), 1) for _ in range(3)]
    print("prefix caching", prefix_caching, "tokens/s per round", rounds, flush=True)


def repeat() -> None:
    from vllm import SamplingParams
    llm = _vllm(block_size=32, enable_prefix_caching=True)
    params = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0)
    llm.generate([{"prompt_token_ids": [7] * 64}], params, use_tqdm=False)    # warm-up
    fresh, repeated = [], []
    for i in range(8):
        prompt = {"prompt_token_ids": [1 + (j * 13 + i * 101) % 5000 for j in range(64)]}
        for times in (fresh, repeated):
            start = time.perf_counter()
            llm.generate([prompt], params, use_tqdm=False)
            times.append(time.perf_counter() - start)
    print(f"64-token prompt, blocks of 32, prefix caching on: fresh {sorted(fresh)[4] * 1e3:.1f} ms, "
          f"repeated {sorted(repeated)[4] * 1e3:.1f} ms (medians of 8)", flush=True)


if __name__ == "__main__":        # vLLM's engine core is a spawned process: keep this guard
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    if sys.argv[1] == "dump":
        dump(sys.argv[2])
    elif sys.argv[1] == "repeat":
        repeat()
    else:
        run(sys.argv[2], sys.argv[3] == "on")
