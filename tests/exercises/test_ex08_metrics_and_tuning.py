"""Lesson 08 exercise: metrics from timestamps; a configuration that meets an SLA.

Part (a) is checked by hand-made examples and against `minillm.sim.metrics` on a simulator
Trace. Part (b) is graded by re-simulating the configuration the learner returns and
comparing its throughput with the best one over the same grid, computed here.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from minillm.sim.metrics import summarize
from minillm.sim.sim_runner import CostModel
from minillm.sim.simulate import simulate
from minillm.sim.workload import lognormal, make_workload, preset_workload

EXERCISE = "ex08_metrics_and_tuning"

# Part (b): 40 chat-like requests, Poisson arrivals at 1.5/s, on a fixed cost model
# (SmolLM2-135M-like on a 2-core CPU), so the answer never depends on this machine.
COST = CostModel(step_overhead=0.035, per_prefill_token=0.0015, per_decode_seq=0.002,
                 per_context_token=2e-6)
SEQS = (2, 4, 8, 16, 32)
BUDGETS = (64, 128, 256, 512, 1024)
SLA_TIGHT_TPOT = (3.0, 0.16)        # (P99 TTFT, P99 TPOT) in seconds
SLA_TIGHT_TTFT_LOOSE = (10.0, 0.09)
SLA_IMPOSSIBLE = (0.01, 0.16)       # no prompt is prefilled in 10 ms


def tuning_workload():
    return make_workload(40, lognormal(120, 0.8, cap=768), lognormal(40, 0.8, cap=256),
                         arrival="poisson", rate=1.5, seed=7)


def measure(config):
    """(throughput, P99 TTFT, P99 TPOT) of a config, or None if it cannot run."""
    try:
        trace = simulate(tuning_workload(), cost_model=COST, **config)
    except ValueError:
        return None
    s = summarize(trace)
    return s["generated_tokens_per_s"], s["ttft_p99"], s["tpot_p99"]


@pytest.fixture(scope="module")
def grid():
    """{(seqs, budget, chunked): measure(...)} — the reference search."""
    return {(s, b, c): measure({"max_num_seqs": s, "max_num_batched_tokens": b,
                                "enable_chunked_prefill": c})
            for s, b, c in itertools.product(SEQS, BUDGETS, (False, True))}


def best_throughput(grid, sla):
    feasible = [m[0] for m in grid.values() if m and m[1] <= sla[0] and m[2] <= sla[1]]
    return max(feasible) if feasible else None


def check_answer(ex, grid, sla):
    config = ex.find_config(tuning_workload(), *sla, cost_model=COST,
                            max_num_seqs_options=SEQS, token_budget_options=BUDGETS)
    assert isinstance(config, dict), f"find_config returned {config!r}, expected a dict"
    keys = {"max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"}
    assert set(config) == keys, f"the config needs exactly the keys {sorted(keys)}"
    result = measure(config)
    assert result is not None, f"{config} cannot serve the workload (ValueError)"
    thr, ttft99, tpot99 = result
    assert ttft99 <= sla[0] and tpot99 <= sla[1], (
        f"{config} misses the SLA: P99 TTFT {ttft99:.2f} s (limit {sla[0]}), "
        f"P99 TPOT {tpot99 * 1e3:.0f} ms (limit {sla[1] * 1e3:.0f})")
    return config, thr


# ---------------------------------------------------------------------- (a)

def test_request_latencies(ex):
    lat = ex.request_latencies(1.0, [1.5, 1.6, 1.8, 2.1])
    assert lat["ttft"] == pytest.approx(0.5)
    assert lat["tpot"] == pytest.approx(0.2)
    assert lat["e2e"] == pytest.approx(1.1)
    assert list(lat["itl"]) == pytest.approx([0.1, 0.2, 0.3])
    one = ex.request_latencies(2.0, [2.25])
    assert one["ttft"] == pytest.approx(0.25) and one["e2e"] == pytest.approx(0.25)
    assert one["tpot"] is None and list(one["itl"]) == []


def test_percentile(ex):
    assert ex.percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert ex.percentile([1, 2, 3, 4, 5], 90) == pytest.approx(4.6)
    assert ex.percentile([7.0], 99) == pytest.approx(7.0)
    assert math.isnan(ex.percentile([], 50))
    rng = np.random.default_rng(0)
    for n in (2, 3, 10, 101):
        values = list(rng.lognormal(0, 1, size=n))
        for q in (0, 50, 90, 99, 100):
            assert ex.percentile(values, q) == pytest.approx(np.percentile(values, q), rel=1e-12)


def test_latency_report_matches_minillm_metrics(ex):
    workload = preset_workload("chat", 30, arrival="poisson", rate=2.0, seed=3)
    trace = simulate(workload, max_num_seqs=8, enable_chunked_prefill=True,
                     max_num_batched_tokens=64, cost_model=COST)
    report = ex.latency_report(trace)
    want = summarize(trace)
    assert set(report) == {"ttft", "tpot", "itl", "e2e"}
    for name in ("ttft", "tpot", "itl", "e2e"):
        for q in (50, 90, 99):
            assert report[name][q] == pytest.approx(want[f"{name}_p{q}"], rel=1e-9), (name, q)


# ---------------------------------------------------------------------- (b)

def test_find_config_meets_the_sla_with_the_best_throughput(ex, grid):
    best = best_throughput(grid, SLA_TIGHT_TPOT)
    assert best is not None and any(m is None or m[2] > SLA_TIGHT_TPOT[1] for m in grid.values()), \
        "test set-up: the SLA must be reachable but not by every configuration"
    config, thr = check_answer(ex, grid, SLA_TIGHT_TPOT)
    assert thr >= best * (1 - 1e-9), (
        f"{config} meets the SLA at {thr:.1f} tok/s, but a configuration of the grid reaches {best:.1f}")


def test_find_config_for_a_second_sla(ex, grid):
    best = best_throughput(grid, SLA_TIGHT_TTFT_LOOSE)
    assert best is not None
    config, thr = check_answer(ex, grid, SLA_TIGHT_TTFT_LOOSE)
    assert thr >= best * (1 - 1e-9), (
        f"{config} meets the SLA at {thr:.1f} tok/s, but a configuration of the grid reaches {best:.1f}")


def test_find_config_returns_none_when_no_config_meets_the_sla(ex, grid):
    assert best_throughput(grid, SLA_IMPOSSIBLE) is None
    assert ex.find_config(tuning_workload(), *SLA_IMPOSSIBLE, cost_model=COST,
                          max_num_seqs_options=SEQS, token_budget_options=BUDGETS) is None
