"""Issue 18: the sparse backend's group cost — fewer, more padded decode groups?
    .venv/bin/python scripts/experiments/sparse_group_cost.py [float32] [ROUNDS] [COST ...]

`split_by_length` cuts a step's decodes into groups of similar length; a group costs
a fixed `group_cost` (in blocks) for its extra calls, padding costs its blocks. The
value, 40, was measured for the torch backend, whose padding is a gathered copy; in the
sparse backend a padded block costs less, so a higher cost (fewer groups) might fit
better. One `LLM` (the default sparse backend) runs the bench's peers workload with each
cost in turn, order reversed every other round; printed: wall seconds per round, the
median per-round ratio against the first cost, and the groups of the 16-decode steps."""
import collections
import statistics
import sys
import time

import torch

from minillm import LLM, SamplingParams
from minillm.bench.peers import peer_output_lengths, peer_prompts


def main(dtype: str, rounds: int, costs: list[int]) -> None:
    torch.set_num_threads(2)
    llm = LLM(max_num_seqs=16, dtype=dtype)
    backend = llm.llm_engine.runner.backend
    prompts = [{"prompt_token_ids": p} for p in peer_prompts(llm.tokenizer)]
    lens = peer_output_lengths()
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lens]
    llm.generate(prompts[:16], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    walls = collections.defaultdict(list)
    for r in range(rounds):
        for cost in (costs if r % 2 == 0 else costs[::-1]):
            backend.group_cost = cost
            start = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            walls[cost].append(time.perf_counter() - start)
    base = costs[0]
    for cost in costs:
        ratios = [b / w for b, w in zip(walls[base], walls[cost])]
        print(f"group cost {cost:5d}: wall {', '.join(f'{w:.2f}' for w in walls[cost])} s; "
              f"speed vs {base}: {statistics.median(ratios):.3f} "
              f"(rounds {', '.join(f'{x:.3f}' for x in ratios)})")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args else "float32", int(args[1]) if len(args) > 1 else 4,
         [int(c) for c in args[2:]] or [40, 80, 10_000])
