"""Turning a technique on and off must not change the answers: the check, shared.

Prefix caching and speculative decoding are both *exact* for greedy decoding: with
or without them, every request should get the same tokens. Their experiments keep the
generated tokens of each run (`tokens` in the run's dict), split them off before the
numbers go to the JSON (`take_tokens`), and compare the first round's answers token
for token (`differing_requests`). A difference is reported, not hidden: on real
hardware it can only come from a numerical near-tie (a different number of rows in a
matmul rounds differently); the oracle tests (`tests/test_engine_oracle.py`) are where
exactness is proven.
"""

from __future__ import annotations

import numpy as np

# the numbers an on/off run keeps, from `metrics.summarize`
RUN_KEYS = ("duration_s", "generated_tokens", "generated_tokens_per_s", "ttft_p50", "ttft_p99",
            "tpot_p50", "num_steps")


def unrelated_prompts(vocab_size: int, count: int) -> list[list[int]]:
    """Random ids that share no block with any workload prompt (warm-ups: nothing to
    cache, nothing to look up)."""
    rng = np.random.default_rng(12345)
    return [rng.integers(2, vocab_size, size=8).tolist() for _ in range(count)]


def take_tokens(results: dict[str, list[dict]]) -> dict[str, dict[str, list[int]]]:
    """Remove the generated tokens from every run's dict (they are not numbers for the
    JSON); return the first round's, per contender, for the comparison."""
    first = {name: runs[0]["tokens"] for name, runs in results.items()}
    for runs in results.values():
        for run in runs:
            del run["tokens"]
    return first


def differing_requests(a: dict[str, list[int]], b: dict[str, list[int]]) -> list[str]:
    """Ids of the requests whose generated tokens differ between two runs."""
    return sorted(rid for rid in a if a[rid] != b.get(rid))


def same_answers_line(label: str, differ: list[str]) -> str:
    """`LABEL: yes`, or how many (and which) requests answered differently."""
    return f"{label}: " + ("yes" if not differ else f"NO for {len(differ)} request(s): {differ[:5]}")
