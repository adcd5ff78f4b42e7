"""Issue 18: the sparse backend's group cost — fewer, more padded decode groups?
    .venv/bin/python scripts/experiments/sparse_group_cost.py [float32] [ROUNDS] [COST ...]

`split_by_length` cuts a step's decodes into groups of similar length; a group costs
a fixed `group_cost` (in blocks) for its extra calls, padding costs its blocks. The
value, 40, was measured for the torch backend, whose padding is a gathered copy; in the
sparse backend a padded block costs less, so a higher cost (fewer groups) might fit
better. One `LLM` (the default sparse backend) runs the bench's peers workload with each
cost in turn, alternating as the bench does (`benchmarks.ab.alternate`); printed per
cost: wall seconds per round, and the median per-round speed against the first cost."""
import statistics
import sys
import time

import torch

from minillm import LLM, SamplingParams
from benchmarks.ab import alternate, paired_ratios
from benchmarks.peers import peer_output_lengths, peer_prompts


def main(dtype: str, rounds: int, costs: list[int]) -> None:
    torch.set_num_threads(2)
    llm = LLM(max_num_seqs=16, dtype=dtype)
    backend = llm.llm_engine.runner.backend
    prompts = [{"prompt_token_ids": p} for p in peer_prompts(llm.tokenizer)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for n in peer_output_lengths()]
    llm.generate(prompts[:16], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)

    def run_with(cost: int):
        def run() -> dict:
            backend.group_cost = cost
            start = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            return {"wall_s": time.perf_counter() - start}
        return run

    results = alternate({cost: run_with(cost) for cost in costs}, rounds)
    for cost in costs:
        speed = paired_ratios(results, costs[0], cost, "wall_s")     # base time / this time
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in results[cost])
        print(f"group cost {cost:5d}: wall {walls} s; "
              f"speed vs {costs[0]}: {statistics.median(speed):.3f} "
              f"(rounds {', '.join(f'{x:.3f}' for x in speed)})")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args else "float32", int(args[1]) if len(args) > 1 else 4,
         [int(c) for c in args[2:]] or [40, 80, 10_000])
