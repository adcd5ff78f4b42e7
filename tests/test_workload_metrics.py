"""Workload generators (seeded, capped) and the metrics computed from a Trace.

The metric tests use a hand-built Trace whose every expected number is worked out in
the comments; the last tests reproduce the seed article's slot-waste example in the
simulator.
"""

from __future__ import annotations

import numpy as np
import pytest

from minillm.sim import metrics
from minillm.sim.metrics import format_table, summarize
from minillm.sim.simulate import simulate
from minillm.engine.trace import RequestRecord, ScheduledEntry, StepRecord, Trace
from minillm.sim.workload import (PRESETS, RequestSpec, LengthDist, exponential, fixed, lognormal,
                              make_workload, pareto, preset_workload, seed_example, uniform)

pytestmark = pytest.mark.unit

ALL_KINDS = [fixed(7), uniform(3, 9), lognormal(50, 1.0, cap=200),
             exponential(40, cap=100), pareto(10, 1.1, cap=300)]


# ---------------------------------------------------------------------- workloads

def test_same_seed_same_workload_other_seed_other_workload():
    args = (50, lognormal(100, 1.0, cap=1000), pareto(20, 1.2, cap=500))
    a = make_workload(*args, arrival="poisson", rate=3.0, seed=7)
    assert a == make_workload(*args, arrival="poisson", rate=3.0, seed=7)
    assert a != make_workload(*args, arrival="poisson", rate=3.0, seed=8)


def test_each_quantity_has_its_own_stream():
    """Changing the output distribution leaves prompts and arrivals untouched."""
    a = make_workload(30, uniform(1, 100), fixed(5), arrival="poisson", rate=2.0, seed=1)
    b = make_workload(30, uniform(1, 100), exponential(50, cap=80), arrival="poisson",
                      rate=2.0, seed=1)
    assert [r.prompt_len for r in a] == [r.prompt_len for r in b]
    assert [r.arrival_time for r in a] == [r.arrival_time for r in b]
    assert [r.output_len for r in a] != [r.output_len for r in b]


@pytest.mark.parametrize("dist", ALL_KINDS, ids=lambda d: d.kind)
def test_lengths_are_ints_within_one_and_cap(dist):
    values = dist.sample(np.random.default_rng(0), 5000)
    assert values.dtype == np.int64
    assert values.min() >= 1 and values.max() <= dist.cap


def test_heavy_tails_reach_their_cap_and_fixed_is_fixed():
    rng = np.random.default_rng(0)
    assert pareto(10, 0.8, cap=300).sample(rng, 2000).max() == 300
    assert set(fixed(7).sample(rng, 100)) == {7}
    assert set(uniform(3, 5).sample(rng, 500)) == {3, 4, 5}     # both ends included


@pytest.mark.parametrize("kwargs", [
    dict(kind="gamma", mean=3, cap=4),                 # unknown kind
    dict(kind="lognormal", median=10, cap=20),         # missing sigma
    dict(kind="uniform", low=5, high=2),               # empty range
    dict(kind="exponential", mean=10, cap=0),          # cap < 1
    dict(kind="pareto", minimum=0, alpha=1.0, cap=5),  # minimum must be > 0
])
def test_bad_length_dist_is_rejected(kwargs):
    with pytest.raises(ValueError):
        LengthDist(**kwargs)


def test_max_tokens_modes():
    out = exponential(50, cap=120)
    send_cap = make_workload(200, fixed(4), out, seed=3)                 # None: the cap
    assert {r.max_tokens for r in send_cap} == {120}
    exact = make_workload(200, fixed(4), out, max_tokens="output_len", seed=3)
    assert all(r.max_tokens == r.output_len for r in exact)
    assert [r.output_len for r in exact] == [r.output_len for r in send_cap]
    clipped = make_workload(200, fixed(4), out, max_tokens=30, seed=3)  # answers cut at 30
    assert all(r.max_tokens == 30 for r in clipped)
    assert [r.output_len for r in clipped] == [min(r.output_len, 30) for r in exact]
    with pytest.raises(ValueError):
        make_workload(3, fixed(4), out, max_tokens=0)


def test_arrivals_burst_and_poisson():
    burst = make_workload(10, fixed(4), fixed(4))
    assert all(r.arrival_time == 0.0 for r in burst)
    poisson = make_workload(4000, fixed(4), fixed(4), arrival="poisson", rate=8.0, seed=2)
    times = np.array([r.arrival_time for r in poisson])
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    assert np.mean(np.diff(times)) == pytest.approx(1 / 8.0, rel=0.1)
    with pytest.raises(ValueError):
        make_workload(3, fixed(4), fixed(4), arrival="poisson")          # no rate
    with pytest.raises(ValueError):
        make_workload(3, fixed(4), fixed(4), arrival="uniform", rate=1.0)


def test_priorities_drawn_from_the_given_levels():
    w = make_workload(100, fixed(4), fixed(4), priorities=(0, 5), seed=0)
    assert {r.priority for r in w} == {0, 5}
    assert {r.priority for r in make_workload(10, fixed(4), fixed(4))} == {0}


def test_request_spec_checks_its_fields():
    with pytest.raises(ValueError):
        RequestSpec("r", prompt_len=0, output_len=1, max_tokens=1)
    with pytest.raises(ValueError):
        RequestSpec("r", prompt_len=1, output_len=5, max_tokens=4)       # cap below answer


BAD_WORKLOAD_ARGUMENTS = [
    # (what is wrong, the call, the parameter the message must name)
    ("a fractional fixed length", lambda: fixed(2.5), "fixed: value"),
    ("a fractional uniform bound", lambda: uniform(1.5, 3), "uniform: low"),
    ("a string median", lambda: lognormal("a", 1.0, cap=10), "lognormal: median"),
    ("a nan sigma", lambda: lognormal(10, float("nan"), cap=10), "lognormal: sigma"),
    ("an infinite alpha", lambda: pareto(1, float("inf"), cap=10), "pareto: alpha"),
    ("a negative seed", lambda: make_workload(3, fixed(2), fixed(2), seed=-1), "seed"),
    ("a fractional seed", lambda: make_workload(3, fixed(2), fixed(2), seed=1.5), "seed"),
    ("a string priority", lambda: make_workload(3, fixed(2), fixed(2), priorities=["a"]), "priorities[0]"),
    ("a fractional priority", lambda: make_workload(3, fixed(2), fixed(2), priorities=[1.5]), "priorities[0]"),
    ("priorities not a list", lambda: make_workload(3, fixed(2), fixed(2), priorities=5), "priorities"),
    ("no priority levels", lambda: make_workload(3, fixed(2), fixed(2), priorities=[]), "priorities"),
    ("a nan rate", lambda: make_workload(3, fixed(2), fixed(2), arrival="poisson", rate=float("nan")), "rate"),
    ("a number as distribution", lambda: make_workload(3, 5, fixed(2)), "prompt_dist"),
    ("a string arrival time", lambda: RequestSpec("r", 1, 1, 1, arrival_time="1"), "arrival_time"),
    ("a nan arrival time", lambda: RequestSpec("r", 1, 1, 1, arrival_time=float("nan")), "arrival_time"),
    ("a fractional request priority", lambda: RequestSpec("r", 1, 1, 1, priority=0.5), "priority"),
    ("max_tokens 0 in the seed example", lambda: seed_example(max_tokens=0), "max_tokens"),
]


@pytest.mark.parametrize("what, call, parameter", BAD_WORKLOAD_ARGUMENTS,
                         ids=[case[0] for case in BAD_WORKLOAD_ARGUMENTS])
def test_bad_workload_arguments_are_refused_naming_the_parameter(what, call, parameter):
    with pytest.raises((TypeError, ValueError)) as error:
        call()
    assert str(error.value).startswith(parameter), error.value


def test_numpy_numbers_are_accepted_and_stored_plain():
    w = make_workload(4, lognormal(np.float64(10), 1, cap=np.int64(50)), fixed(np.int64(3)),
                      seed=np.int64(2), priorities=[np.int64(0), 1], max_tokens=np.int64(5))
    assert {type(getattr(r, f)) for r in w for f in ("prompt_len", "max_tokens", "priority")} == {int}
    assert w == make_workload(4, lognormal(10.0, 1, cap=50), fixed(3), seed=2, priorities=[0, 1],
                              max_tokens=5)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_make_valid_workloads(name):
    w = preset_workload(name, 300, arrival="poisson", rate=10.0, seed=0)
    assert len(w) == 300 and len({r.request_id for r in w}) == 300
    lens = np.array([r.output_len for r in w])
    if name == "classification":
        assert lens.max() <= 3                                           # near-fixed, short
    else:
        assert lens.max() > 5 * np.median(lens)                          # heavy right tail


def test_seed_example():
    w = seed_example()
    assert [r.output_len for r in w] == [30, 40, 50, 60, 700, 80, 90, 100]
    assert all(r.arrival_time == 0.0 and r.max_tokens == r.output_len for r in w)
    assert {r.max_tokens for r in seed_example(max_tokens=1024)} == {1024}


# ---------------------------------------------------------------------- metrics

def hand_trace() -> Trace:
    """Three finished requests, one aborted, five steps, 2 slots, blocks of 4 tokens.

    request  arrival  token times             finish  reason
    A        0.0      1.0  1.5  2.0  3.0      3.0     stop   (preempted at 2.0, recomputed)
    B        0.5      1.5  2.0                2.0     length
    C        1.0      2.5                     2.5     stop
    D        0.0      —                       0.2     abort
    """
    def req(rid, arrival, prompt, times, reason, finish, preempt=0):
        return RequestRecord(rid, arrival, prompt, max_tokens=8, output_len=len(times),
                             first_token_time=times[0] if times else None,
                             finish_time=finish, token_times=times, num_preemptions=preempt,
                             finish_reason=reason)

    def step(i, start, end, entries, used, held, preempted=()):
        return StepRecord(i, start, end, [ScheduledEntry(*e) for e in entries],
                          list(preempted), [], num_slots=2, num_waiting=0,
                          kv_blocks_used=used, kv_blocks_free=10 - used, kv_tokens_held=held)

    requests = [req("A", 0.0, 4, [1.0, 1.5, 2.0, 3.0], "stop", 3.0, preempt=1),
                req("B", 0.5, 2, [1.5, 2.0], "length", 2.0),
                req("C", 1.0, 3, [2.5], "stop", 2.5),
                req("D", 0.0, 5, [], "abort", 0.2)]
    steps = [
        step(0, 0.0, 1.0, [("A", 4, 0, 4)], used=1, held=4),                   # 4/4
        step(1, 1.0, 1.5, [("A", 0, 1, 5), ("B", 2, 0, 2)], used=3, held=7),   # 7/12
        step(2, 1.5, 2.0, [("A", 0, 1, 6), ("B", 0, 1, 3)], used=2, held=6),   # 6/8, B done
        step(3, 2.0, 2.5, [("C", 3, 0, 3)], used=0, held=0, preempted=["A"]),  # C done
        step(4, 2.5, 3.0, [("A", 7, 0, 7)], used=0, held=0),                   # A done
    ]
    return Trace(config={"block_size": 4}, steps=steps,
                 requests={r.request_id: r for r in requests})


def test_per_request_latencies_by_hand():
    m = metrics.request_metrics(hand_trace())
    # TTFT = first token − arrival: A 1.0, B 1.5 − 0.5, C 2.5 − 1.0 (D aborted: left out)
    np.testing.assert_allclose(m["ttft"], [1.0, 1.0, 1.5])
    # TPOT = (finish − first) / (n − 1): A 2.0 / 3, B 0.5 / 1; C has one token: no TPOT
    np.testing.assert_allclose(m["tpot"], [2 / 3, 0.5])
    np.testing.assert_allclose(m["e2e"], [3.0, 1.5, 1.5])
    # ITL: every gap: A 0.5 0.5 1.0 (the preemption stall), B 0.5
    np.testing.assert_allclose(m["itl"], [0.5, 0.5, 1.0, 0.5])


def test_percentiles_use_linear_interpolation():
    # sorted TTFTs [1.0, 1.0, 1.5]: P90 sits at rank 0.9 × 2 = 1.8 → 1.0 + 0.8 × 0.5
    p = metrics.percentiles([1.0, 1.5, 1.0])
    assert p == pytest.approx({50: 1.0, 90: 1.4, 99: 1.49})
    assert np.isnan(metrics.percentiles([])[50])


def test_summary_by_hand():
    s = summarize(hand_trace())
    assert s["num_requests"] == 4 and s["num_completed"] == 3 and s["num_steps"] == 5
    assert s["duration_s"] == 3.0                      # arrival 0.0 → last step end 3.0
    assert s["generated_tokens"] == 7                  # 4 + 2 + 1 + 0
    assert s["generated_tokens_per_s"] == pytest.approx(7 / 3)
    assert s["total_tokens_per_s"] == pytest.approx((7 + 4 + 2 + 3) / 3)  # D made no token
    # slots: 1 + 2 + 2 + 1 + 1 busy of 5 steps × 2
    assert (s["busy_slot_steps"], s["slot_steps"]) == (7, 10)
    assert s["slot_utilization"] == pytest.approx(0.7)
    # KV, duration-weighted over the steps that end with blocks in use (0, 1, 2):
    # (1.0 · 4/4 + 0.5 · 7/12 + 0.5 · 6/8) / 2.0 = 5/6
    assert s["kv_utilization"] == pytest.approx(5 / 6)
    assert s["kv_waste"] == pytest.approx(1 / 6)
    assert s["preemptions"] == 1
    assert s["ttft_p50"] == 1.0 and s["tpot_p50"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert s["itl_p90"] == pytest.approx(0.85)         # sorted .5 .5 .5 1.0, rank 2.7


def test_goodput_by_hand():
    t = hand_trace()
    # TTFT <= 1.2 and TPOT <= 0.6: A fails TPOT (0.67), C fails TTFT (1.5): only B
    g = metrics.goodput(t, ttft_slo=1.2, tpot_slo=0.6)
    assert g == pytest.approx({"good_requests": 1, "goodput_rps": 1 / 3, "goodput_fraction": 1 / 3})
    # TPOT <= 0.7 only: A and B pass, C has no TPOT and passes too
    assert metrics.goodput(t, tpot_slo=0.7)["good_requests"] == 3
    assert summarize(t, ttft_slo=1.2)["good_requests"] == 2


def test_format_table_shows_every_summary_side_by_side():
    text = format_table({"x": summarize(hand_trace()), "y": {"ttft_p50": 0.25}})
    lines = text.splitlines()
    assert lines[0].split() == ["metric", "x", "y"]
    assert any(line.split()[:3] == ["ttft_p50", "1000.0", "ms"] for line in lines)
    assert any(line.startswith("slot_utilization") and "70.0%" in line for line in lines)


# ---------------------------------------------------------------------- the seed example

def test_seed_example_static_slot_waste():
    """8 slots, outputs 30 … 700: 5600 slot-iterations, 1150 useful, 79.5% idle.

    What the engine does under static batching: step 0 prefills all 8 prompts and each
    row samples its first output token; steps 1 … 699 are decodes, each giving every
    still-running row one more token. The batch ends when the 700-token request gets
    its 700th token, in step 699. The seed article's "iteration" is one token per slot,
    so we count every token-producing step — the prefill step plus the 699 decode
    steps, 700 in all — with 8 slots each. A slot is useful in a step if its row
    produced a token (`step.scheduled`); finished rows sit in `step.idle`.
    """
    trace = simulate(seed_example(), scheduling="static", max_num_seqs=8)
    steps = trace.steps
    assert len(steps) == 700
    assert steps[0].num_decode_tokens == 0 and len(steps[0].scheduled) == 8      # prefill
    decode_steps = steps[1:]
    assert all(s.num_prefill_tokens == 0 for s in decode_steps)
    assert len(decode_steps) == 699
    assert all(len(s.scheduled) + len(s.idle) == s.num_slots == 8 for s in steps)
    slot_iterations = sum(s.num_slots for s in steps)
    useful = sum(len(s.scheduled) for s in steps)
    assert (slot_iterations, useful) == (5600, 1150)
    assert 1 - useful / slot_iterations == pytest.approx(0.795, abs=5e-4)
    assert summarize(trace)["slot_utilization"] == pytest.approx(1150 / 5600)


def queued_seed_example(copies: int = 4) -> list[RequestSpec]:
    """The seed example `copies` times over, all at t = 0: a queue behind 8 slots."""
    return [RequestSpec(f"req-{c}-{r.request_id}", r.prompt_len, r.output_len, r.max_tokens)
            for c in range(copies) for r in seed_example()]


def test_continuous_fills_the_slots_static_leaves_idle():
    """With only 8 requests for 8 slots no scheduler can do better (nothing waits to
    take a freed slot), so both policies run the same 700 steps. With a queue behind
    the slots, continuous batching hands each freed slot to the next request."""
    w = seed_example()
    assert (summarize(simulate(w, max_num_seqs=8))["slot_utilization"]
            == pytest.approx(1150 / 5600))
    w = queued_seed_example()
    static = summarize(simulate(w, scheduling="static", max_num_seqs=8))
    continuous = summarize(simulate(w, scheduling="continuous", max_num_seqs=8))
    assert static["slot_utilization"] == pytest.approx(4 * 1150 / (4 * 5600))
    # 4600 useful slot-steps: 2800 steps × 8 slots (static) vs 940 × 8 (continuous)
    assert continuous["slot_utilization"] > 0.6 > 2.9 * static["slot_utilization"]
    assert continuous["generated_tokens"] == static["generated_tokens"] == 4 * 1150
    assert continuous["duration_s"] < 0.5 * static["duration_s"]
