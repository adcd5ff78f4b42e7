"""docs/performance.md, change 7: where a continuous run of the peers workload spends its
forward passes, and its tokens/s in a fresh process.
    .venv/bin/python scripts/experiments/peer_step_kinds.py [float32|bfloat16] [EXECUTOR]

One `LLM` on its own in this process (no other contender loaded), the bench's peers
workload (64 chat prompts, 16 at a time, EOS ignored), two timed runs after a warm-up.
Each forward pass is timed and sorted by what the step carried: 16 decodes, a new
prompt beside the decodes, 1-3 decodes (the long answers finishing), 4-15 decodes.
EXECUTOR: "auto" (default), "cpu" or "eager". The forward pass is timed by putting a
wrapper in the runner's `model` attribute (called as model(input_ids, positions,
kv_caches, attention, logits_indices))."""
import statistics
import sys
import time

import torch

from benchmarks.peers import peer_output_lengths, peer_prompts
from minillm import LLM, SamplingParams

KINDS = {"16 decodes": lambda rows, seqs: rows == seqs == 16,
         "with a prompt": lambda rows, seqs: rows > seqs,
         "1-3 decodes": lambda rows, seqs: rows == seqs <= 3,
         "4-15 decodes": lambda rows, seqs: rows == seqs and 4 <= seqs <= 15}


def main(dtype: str, executor: str = "auto") -> None:
    torch.set_num_threads(2)
    llm = LLM(max_num_seqs=16, dtype=dtype, executor=executor)
    runner = llm.llm_engine.runner
    model, steps = runner.model, []

    def timed_forward(*args):          # args: input_ids [T], ..., logits_indices [S]
        start = time.perf_counter()
        out = model(*args)
        steps.append((args[0].shape[0], args[4].shape[0], time.perf_counter() - start))
        return out
    runner.model = timed_forward
    prompts = [{"prompt_token_ids": p} for p in peer_prompts(llm.tokenizer)]
    lens = peer_output_lengths()
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lens]
    llm.generate(prompts[:16], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    for round_index in range(2):
        steps.clear()
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - start
        print(f"{dtype} round {round_index}: {sum(lens) / wall:.1f} tokens/s, wall {wall:.1f} s, "
              f"forward {sum(t for *_, t in steps):.1f} s")
        for name, matches in KINDS.items():
            times = [t for rows, seqs, t in steps if matches(rows, seqs)]
            if times:
                print(f"   {name:14s} {len(times):4d} steps, {sum(times):5.1f} s, "
                      f"median {1e3 * statistics.median(times):6.1f} ms")


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    main(sys.argv[1] if len(sys.argv) > 1 else "float32",
         sys.argv[2] if len(sys.argv) > 2 else "auto")
