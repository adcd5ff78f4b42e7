"""Fair comparisons on a noisy machine: alternate the contenders, report medians.

Timings on a shared machine drift: another program starts, the CPU warms up,
memory fills. Running all of A and then all of B would charge that drift to whichever
ran second. So the bench runs them *in rounds* — one run of each contender per round —
and reverses the order every other round:

    round 0:  A B C        round 1:  C B A        round 2:  A B C  …

(an "ABBA" design: a drift that grows steadily over time lands on every contender
equally, on average). From the rounds it reports

* each contender's **median** (robust to the one run that a background job ruined);
* each ratio as the **median of per-round ratios** — A/B measured a few seconds apart
  in the same round shares that round's conditions, so the paired ratio is steadier
  than the ratio of two medians.
"""

from __future__ import annotations

import statistics
from typing import Callable


def round_order(names: list[str], round_index: int) -> list[str]:
    """A B C in even rounds, C B A in odd rounds."""
    return list(names) if round_index % 2 == 0 else list(reversed(names))


def alternate(runners: dict[str, Callable[[], dict]], rounds: int,
              on_run: Callable[[str, int], None] | None = None) -> dict[str, list[dict]]:
    """Run every runner once per round, in `round_order`; collect their result dicts.

    `on_run(name, round_index)` is called after each run (the progress bar hooks in).
    Returns {name: [result of round 0, result of round 1, …]}.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    results: dict[str, list[dict]] = {name: [] for name in runners}
    for r in range(rounds):
        for name in round_order(list(runners), r):
            results[name].append(runners[name]())
            if on_run is not None:
                on_run(name, r)
    return results


def median(values) -> float:
    values = [v for v in values if v == v]          # drop NaN
    return statistics.median(values) if values else float("nan")


def medians(results: dict[str, list[dict]]) -> dict[str, dict]:
    """{name: {key: median over the rounds}} for every key of the runs' result dicts."""
    return {name: {k: median([r[k] for r in runs]) for k in runs[0]}
            for name, runs in results.items()}


def paired_ratios(results: dict[str, list[dict]], numerator: str, denominator: str,
                  key: str) -> list[float]:
    """Per round: results[numerator][r][key] / results[denominator][r][key]."""
    return [a[key] / b[key] if b[key] else float("nan")
            for a, b in zip(results[numerator], results[denominator])]


def summary(values: list[float]) -> dict:
    """Median, min, max and the values themselves (for the JSON)."""
    clean = [v for v in values if v == v]
    return {"median": median(values), "min": min(clean) if clean else float("nan"),
            "max": max(clean) if clean else float("nan"), "values": list(values)}
