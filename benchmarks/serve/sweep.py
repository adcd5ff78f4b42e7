"""Run one workload at several request rates against one server; summarize each rate."""

from __future__ import annotations

from benchmarks.serve.load import run_load_sync
from benchmarks.serve.results import summarize
from benchmarks.serve.workload import offsets


def run_rate(base_url: str, bodies: list[dict], rate: float, *, seed: int = 0,
             slos: dict | None = None, percentiles=(50, 90, 99), **load_kwargs):
    """→ (summary dict with "request_rate", the per-request results)."""
    results, duration = run_load_sync(base_url, bodies, offsets(len(bodies), rate, seed),
                                      **load_kwargs)
    summary = summarize(results, duration, percentiles, slos)
    summary["request_rate"] = rate
    return summary, results


def run_sweep(base_url: str, bodies: list[dict], rates, **kwargs) -> list[dict]:
    """The same requests at each rate, in the order given."""
    return [run_rate(base_url, bodies, rate, **kwargs)[0] for rate in rates]
