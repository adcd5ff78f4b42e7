"""Issue 18: one decode step of minillm and of vLLM, by batch size, in the same run.
    .venv/bin/python scripts/experiments/decode_steps_vs_vllm.py float32 /tmp/vllm-venv/bin/python

The peers run gives one ratio for a whole workload; this asks where it comes from. For
a batch of B identical-length chat prompts (the peers prompts, all cut to their shortest,
36 tokens), each engine runs the batch twice: with `max_tokens` 2 and with 2 + N. Both
runs prefill the same prompts, so (t(2 + N) - t(2)) / N is the time of one decode step
of B sequences (context 37-102 tokens, as in the peers run), engine overhead included.
vLLM runs as the bench runs it (`peers.VllmWorker`: its own processes). Rounds alternate
minillm and vLLM (`bench.ab.alternate`); medians over rounds, ms per step, vLLM /
minillm per round, and the median 2-token run (prefill + one step) of each."""
import sys
from functools import partial
from pathlib import Path

from benchmarks.ab import alternate, median
from benchmarks.common import Bench, BenchConfig, kv_blocks_for, warm_up
from benchmarks.peers import FULL_PEERS, VllmWorker, _model_dir, peer_prompts, run_minillm
from minillm.sim.workload import RequestSpec

PROMPT_LEN, EXTRA_STEPS, BATCHES, ROUNDS = 36, 64, (1, 4, 16), 3


def step_ms(run, prompts: list[list[int]]) -> dict:
    """ms per decode step of len(prompts) sequences, from two timed runs of `run`."""
    short = run(prompts, [2] * len(prompts))["elapsed_s"]
    long = run(prompts, [2 + EXTRA_STEPS] * len(prompts))["elapsed_s"]
    return {"ms": (long - short) / EXTRA_STEPS * 1e3, "short_ms": short * 1e3}


def main(dtype: str, python: str) -> None:
    bench = Bench(BenchConfig(dtype=dtype))
    prompts = [p[:PROMPT_LEN] for p in peer_prompts(bench.tokenizer, FULL_PEERS, bench.vocab_size, 0)
               if len(p) >= PROMPT_LEN]
    specs = [RequestSpec("probe", PROMPT_LEN, 2 + EXTRA_STEPS, 2 + EXTRA_STEPS)]
    llm = bench.mode_llms(("continuous",), kv_blocks_for(specs, 16))["continuous"]
    warm_up(llm, prompts[:16])

    def minillm(batch, lens):
        specs = [RequestSpec(f"p{i}", len(p), n, n) for i, (p, n) in enumerate(zip(batch, lens))]
        return run_minillm(llm, specs, batch)
    worker = VllmWorker(python, str(_model_dir("smollm2-135m")), 16, dtype, 2,
                        Path("/tmp/decode_steps_vs_vllm.log"))
    try:
        worker.run(prompts[:16], [2] * 16)
        for size in BATCHES:
            batch = (prompts * size)[:size]
            runners = {"minillm": partial(step_ms, minillm, batch),
                       "vLLM": partial(step_ms, worker.run, batch)}
            results = alternate(runners, ROUNDS)
            ms = {name: median(r["ms"] for r in runs) for name, runs in results.items()}
            short = {name: median(r["short_ms"] for r in runs) for name, runs in results.items()}
            ratios = [round(b["ms"] / a["ms"], 2) for a, b in zip(results["minillm"], results["vLLM"])]
            print(f"{dtype} batch {size}: minillm {ms['minillm']:.1f} ms, vLLM {ms['vLLM']:.1f} ms "
                  f"a step; vLLM / minillm per round {ratios}; the run of 2 tokens (prefill + 1 step): "
                  f"minillm {short['minillm']:.0f} ms, vLLM {short['vLLM']:.0f} ms", flush=True)
    finally:
        worker.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
