"""The chunked-prefill explorer: the budget bounds every step and cuts the ITL tail."""

from __future__ import annotations

import numpy as np
import pytest

from minillm.sim.metrics import percentiles, request_metrics
from minillm.widgets.chunked import (ChunkedPrefillExplorer, itl_points, simulate_stutter,
                                     trace_numbers)
from minillm.sim.workload import stutter_workload

pytestmark = pytest.mark.unit
PNG = b"\x89PNG\r\n\x1a\n"
SMALL = dict(num_decoders=3, long_prompt=600, num_long=2)


def test_numbers_are_the_traces():
    workload = stutter_workload(num_decoders=3, long_prompt=600, num_long=2)
    trace = simulate_stutter(workload, chunked=True, budget=64)
    n = trace_numbers(trace)
    m = request_metrics(trace)
    assert n["itl_p99"] == pytest.approx(percentiles(m["itl"])[99])
    assert n["ttft_p50"] == pytest.approx(percentiles(m["ttft"])[50])
    assert n["max_step_tokens"] == max(s.num_batched_tokens for s in trace.steps) <= 64
    t, gaps = itl_points(trace)
    assert np.sort(gaps) == pytest.approx(np.sort(m["itl"]))
    assert (np.diff(sorted(t)) >= 0).all() and len(t) == len(gaps)


def test_chunking_cuts_the_itl_tail_and_moving_the_budget_recomputes():
    e = ChunkedPrefillExplorer(budget=64, **SMALL)
    r = e.result
    assert r["max_step_tokens"] <= 64
    assert r["reference"]["max_step_tokens"] >= 600          # the whole prompt in one step
    assert r["itl_p99"] < r["reference"]["itl_p99"]
    assert r["itl_p99_ratio"] == pytest.approx(r["reference"]["itl_p99"] / r["itl_p99"])
    assert r["itl_p99_ratio"] > 2
    assert r["long_ttft_mean"] > r["reference"]["long_ttft_mean"], "chunking delays the long prompts"
    assert e.image.value[:8] == PNG
    assert f"{r['itl_p99_ratio']:.1f}×" in e.numbers.value
    first = e.image.value
    e.budget.value = 512
    bigger = e.result
    assert 64 < bigger["max_step_tokens"] <= 512
    assert bigger["itl_p99"] > r["itl_p99"]
    assert e.image.value != first


def test_chunking_off_and_prompt_length():
    e = ChunkedPrefillExplorer(**SMALL)
    e.chunking.value = False
    assert e.budget.disabled
    assert e.result["reference"] is None
    assert e.result["max_step_tokens"] >= 600
    before = e.result["itl_max"]
    e.long_prompt.value = 1500                               # a longer prompt, a longer stall
    assert e.result["max_step_tokens"] >= 1500
    assert e.result["itl_max"] > before
    e.chunking.value = True
    assert not e.budget.disabled and e.result["max_step_tokens"] <= e.budget.value


def test_real_traces_mode():
    workload = stutter_workload(**SMALL)
    plain = simulate_stutter(workload, chunked=False, budget=0)
    chunked = simulate_stutter(workload, chunked=True, budget=128)
    e = ChunkedPrefillExplorer(traces={"no chunking": plain, "chunked": chunked})
    assert e.result["reference"]["itl_p99"] == pytest.approx(trace_numbers(plain)["itl_p99"])
    assert e.result["itl_p99"] == pytest.approx(trace_numbers(chunked)["itl_p99"])
    image = e.image.value
    e.which.value = "no chunking"
    assert e.result["reference"] is None and e.image.value != image
    with pytest.raises(ValueError):
        ChunkedPrefillExplorer(traces={})
