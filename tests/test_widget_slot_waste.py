"""The slot-waste explorer: the seed preset, moving controls, drawing a real Trace."""

from __future__ import annotations

import time

import numpy as np
import pytest

from minillm.sim.simulate import simulate
from minillm.sim.workload import RequestSpec, seed_example
from minillm.widgets.layout import DECODE, EMPTY, IDLE, PREFILL, slot_layout
from minillm.widgets.slot_waste import SlotWasteExplorer, length_dist, output_lengths

pytestmark = pytest.mark.unit


def test_seed_preset_shows_79_5_percent_idle():
    explorer = SlotWasteExplorer(preset="seed")
    static = explorer.result["static"]
    assert (static["iterations"], static["slot_iterations"], static["useful"]) == (700, 5600, 1150)
    assert static["idle_fraction"] == pytest.approx(1 - 1150 / 5600)
    assert f"{static['idle_fraction']:.1%}" == "79.5%"
    assert static["held_idle_fraction"] == pytest.approx(static["idle_fraction"])
    # with no queue, continuous batching has nothing to fill the slots with: the same
    # slot-iterations are unused, but they are empty instead of held
    cont = explorer.result["continuous"]
    assert cont["iterations"] == 700 and cont["held_idle_fraction"] == 0
    assert cont["empty_fraction"] == pytest.approx(static["idle_fraction"])
    assert "79.5%" in explorer.numbers.value
    assert explorer.image.value[:8] == b"\x89PNG\r\n\x1a\n"


def test_moving_controls_recomputes_and_redraws():
    explorer = SlotWasteExplorer(preset="seed")
    png = explorer.image.value
    start = time.perf_counter()
    explorer.slots.value = 4                        # two batches: max(30..60) + 700
    print(f"\none update (slots 8 → 4): {time.perf_counter() - start:.2f} s "
          f"(the explorer measured {explorer.result['update_seconds']:.2f} s)")
    static = explorer.result["static"]
    assert static["iterations"] == 60 + 700
    assert static["slot_iterations"] == 4 * 760 and static["useful"] == 1150
    assert explorer.image.value != png
    # a queue appears (24 requests, 8 slots): continuous refills the slots, static cannot
    explorer.slots.value = 8
    explorer.requests.value = 24
    static, cont = explorer.result["static"], explorer.result["continuous"]
    assert static["iterations"] == 3 * 700
    assert cont["iterations"] < static["iterations"]
    assert cont["idle_fraction"] < static["idle_fraction"]
    assert cont["tokens_per_s"] > static["tokens_per_s"]
    assert cont["e2e_p99"] < static["e2e_p99"]
    # one policy only
    png = explorer.image.value
    explorer.policy.value = "continuous"
    assert set(explorer.result) == {"continuous", "update_seconds"}
    assert explorer.image.value != png


def test_fixed_lengths_waste_nothing_and_spread_adds_waste():
    explorer = SlotWasteExplorer(distribution="fixed", num_requests=16, median=20)
    assert explorer.result["static"]["idle_fraction"] == 0
    assert explorer.spread.disabled and not explorer.median.disabled
    explorer.distribution.value = "lognormal"
    explorer.spread.value = 1.5
    assert explorer.result["static"]["idle_fraction"] > 0.3
    explorer.arrival.value = "poisson"
    assert not explorer.rate.disabled
    assert explorer.result["static"]["num_requests"] == 16


def test_length_distributions_have_the_median_and_no_spread_at_zero():
    rng = np.random.default_rng(0)
    for kind in ("uniform", "lognormal", "pareto"):
        draws = length_dist(kind, 50, 1.0).sample(rng, 4001)
        assert abs(np.median(draws) - 50) <= 3, kind
        assert set(length_dist(kind, 50, 0.0).sample(rng, 10).tolist()) == {50}
    assert output_lengths("seed lengths", 10)[8:] == [30, 40]


def test_slot_grid_of_a_static_trace():
    trace = simulate([RequestSpec(f"r{i}", 4, n, n) for i, n in enumerate([2, 4, 1])],
                     scheduling="static", max_num_seqs=2)
    grid, owners = slot_layout(trace)               # batches {r0, r1} (4 steps), {r2}
    assert grid.shape == (2, 5)
    assert grid[:, 0].tolist() == [PREFILL, PREFILL]
    assert grid[0].tolist() == [PREFILL, DECODE, IDLE, IDLE, PREFILL]
    assert grid[1].tolist() == [PREFILL, DECODE, DECODE, DECODE, EMPTY]
    assert owners[0].tolist() == [0, 0, 0, 0, 2]


def test_from_trace_draws_a_recorded_trace():
    traces = {"static": simulate(seed_example(), scheduling="static", max_num_seqs=8),
              "continuous": simulate(seed_example(), scheduling="continuous", max_num_seqs=4)}
    explorer = SlotWasteExplorer.from_trace(traces, title="recorded")
    assert explorer.result["static"]["idle_fraction"] == pytest.approx(1 - 1150 / 5600)
    assert explorer.result["continuous"]["slot_iterations"] == 4 * explorer.result["continuous"]["iterations"]
    assert explorer.image.value[:4] == b"\x89PNG"
    assert "simulated s" in explorer.numbers.value          # the traces came from the simulator
    single = SlotWasteExplorer.from_trace(traces["static"])
    assert list(single.result) == ["static", "update_seconds"]
    with pytest.raises(TypeError):
        SlotWasteExplorer.from_trace([1, 2])
