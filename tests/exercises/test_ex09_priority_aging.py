"""Lesson 09 exercise: priority with aging as a policy function, graded in the engine and simulator.

The learner's `priority_key` runs inside the real engine (tiny random Llama, `LLM(policy=...)`)
and inside the simulator. The last two tasks are the point of the lesson: with aging,
a low-priority request under a never-ending stream of urgent ones finishes within a
bound we can compute (property-tested with Hypothesis); without aging it starves.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minillm import LLM, SamplingParams
from minillm.engine.sequence import Sequence
from minillm.model.tiny import build_tiny_llama
from minillm.sim.sim_runner import CostModel
from minillm.sim.simulate import add_workload, make_sim_engine, simulate
from minillm.sim.workload import RequestSpec, make_workload, uniform

EXERCISE = "ex09_priority_aging"
STEP = 0.01                       # every simulated step takes exactly 10 ms
FIXED_STEP = CostModel(step_overhead=STEP, per_prefill_token=0.0, per_decode_seq=0.0,
                       per_context_token=0.0)


def seq(priority, arrival, order=0):
    s = Sequence(f"s{order}", [5, 6, 7], SamplingParams(max_tokens=4),
                 arrival_time=arrival, priority=priority)
    s.admission_order = order
    return s


# ---------------------------------------------------------------------- the pieces

def test_effective_priority(ex):
    assert ex.effective_priority(seq(10, arrival=1.0), 4.0, 2.0) == pytest.approx(4.0)
    assert ex.effective_priority(seq(10, arrival=1.0), 1.0, 2.0) == pytest.approx(10.0)
    assert ex.effective_priority(seq(3, arrival=5.0), 4.0, 2.0) == pytest.approx(3.0), \
        "a request cannot have waited a negative time"
    assert ex.effective_priority(seq(7, 0.0), 100.0, 0.0) == pytest.approx(7.0)


def test_priority_key_sorts_by_effective_priority_then_arrival(ex):
    old_low = seq(5, arrival=0.0, order=0)      # low priority, waiting since t = 0
    early = seq(0, arrival=2.0, order=1)        # urgent, arrived within 5 s of old_low
    twin = seq(0, arrival=2.0, order=2)         # same priority and arrival as `early`
    tie = seq(0, arrival=5.0, order=3)          # arrived exactly 5 s later: equal effective
    late = seq(0, arrival=6.0, order=4)         # arrived more than 5 s later
    queue = [late, twin, tie, old_low, early]

    def order(aging_rate, now):
        return [s.request_id for s in sorted(queue, key=lambda s: ex.priority_key(s, now, aging_rate))]

    # aging 1/s, now = 7: effective old_low −2, early/twin −5, tie −2, late −1
    assert order(1.0, 7.0) == ["s1", "s2", "s0", "s3", "s4"]
    # no aging: all urgent ones first (by arrival, then admission order), old_low last
    assert order(0.0, 7.0) == ["s1", "s2", "s3", "s4", "s0"]


def test_overtake_horizon(ex):
    assert ex.overtake_horizon(5, 1.0) == pytest.approx(5.0)
    assert ex.overtake_horizon(10, 4.0) == pytest.approx(2.5)
    assert ex.overtake_horizon(3, 0.0) == math.inf
    assert ex.overtake_horizon(0, 2.0) == 0.0
    assert ex.overtake_horizon(-2, 2.0) == 0.0


# ---------------------------------------------------------------------- inside the engine

def test_real_engine_serves_urgent_first_and_outputs_do_not_change(ex):
    """Tiny Llama, one batch slot: service order follows priority; tokens are unchanged."""
    prompts = [{"prompt_token_ids": [(11 * i + 3 * j) % 250 + 2 for j in range(4 + i)]}
               for i in range(5)]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    priorities = [3, 0, 2, 0, 1]
    config = dict(max_num_seqs=1, block_size=4, num_kv_blocks=32, max_model_len=128)
    fcfs = LLM(build_tiny_llama(seed=0), **config)
    want = [o.outputs[0].token_ids for o in fcfs.generate(prompts, params, use_tqdm=False)]
    mine = LLM(build_tiny_llama(seed=0), policy=ex.priority_key, **config)
    outs = mine.generate(prompts, params, use_tqdm=False, priority=priorities)
    assert [o.outputs[0].token_ids for o in outs] == want, "scheduling must never change tokens"
    started = sorted(range(5), key=lambda i: outs[i].metrics.first_scheduled_time)
    assert started == [1, 3, 4, 2, 0], f"service order {started}: expected by priority, then arrival"


@pytest.mark.parametrize("aging_rate", [0.0, 0.5, 5.0])
def test_same_schedule_as_minillm_priority_policy(ex, aging_rate):
    """Simulator, a KV cache small enough to preempt: step-by-step the same plan."""
    work = make_workload(40, uniform(4, 40), uniform(2, 30), arrival="poisson", rate=8.0,
                         max_tokens="output_len", seed=3, priorities=(0, 1, 2, 5))
    config = dict(max_num_seqs=4, block_size=8, num_kv_blocks=14, max_model_len=128,
                  aging_rate=aging_rate)
    reference = simulate(work, policy="priority", **config)
    mine = simulate(work, policy=ex.priority_key, max_steps=5000, **config)
    plan = lambda t: [([(e.request_id, e.num_prefill_tokens, e.num_decode_tokens)
                        for e in s.scheduled], s.preempted) for s in t.steps]
    assert sum(len(s.preempted) for s in reference.steps) > 0, "the workload must preempt"
    assert plan(mine) == plan(reference)


# ---------------------------------------------------------------------- starvation

def low_under_urgent_stream(ex, *, aging_rate, priority, slots, k_urgent, k_low, gap, horizon_s):
    """One low-priority request at t = 0, urgent ones every `gap` s until `horizon_s`.

    The stream opens with one urgent request per slot at t = 0, so "low" never finds
    a free slot without competition.

    Every step takes exactly STEP seconds (fixed cost model), so steps and seconds
    convert exactly. Returns (engine, specs of the urgent stream).
    """
    engine = make_sim_engine(policy=ex.priority_key, max_num_seqs=slots,
                             aging_rate=aging_rate, cost_model=FIXED_STEP, max_model_len=64)
    stream = [RequestSpec(f"urgent-{i}", 4, k_urgent, k_urgent, max(0.0, gap * (i - slots)), 0)
              for i in range(int(horizon_s / gap) + slots + 1)]
    add_workload(engine, [RequestSpec("low", 4, k_low, k_low, 0.0, priority), *stream])
    return engine, stream


def starvation_bound_steps(priority, aging_rate, slots, k_urgent, k_low, gap, stream):
    """Steps until "low" must have finished, derived from the aging rule alone.

    Only urgent requests that arrived no later than priority / aging_rate can ever rank
    ahead of "low" (see the exercise's docstring). While "low" waits, every slot runs
    one of them; each needs k_urgent slot-steps (its prefill step makes the first
    token). Then "low" needs k_low steps of its own.
    """
    horizon = priority / aging_rate
    ahead = sum(1 for s in stream if s.arrival_time <= horizon + 1e-9)
    return math.ceil(ahead * k_urgent / slots) + k_low


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(priority=st.integers(1, 20), horizon=st.floats(0.05, 0.4), slots=st.integers(1, 3),
       k_urgent=st.integers(2, 6), k_low=st.integers(1, 6), overload=st.floats(1.2, 3.0))
def test_aging_bounds_the_wait_under_a_steady_urgent_stream(ex, priority, horizon, slots,
                                                           k_urgent, k_low, overload):
    """Property: with aging > 0 the low-priority request finishes within the bound."""
    aging_rate = priority / horizon
    gap = k_urgent * STEP / (slots * overload)        # urgent work arrives faster than served
    engine, stream = low_under_urgent_stream(
        ex, aging_rate=aging_rate, priority=priority, slots=slots, k_urgent=k_urgent,
        k_low=k_low, gap=gap, horizon_s=3 * horizon + 0.5)
    bound = starvation_bound_steps(priority, aging_rate, slots, k_urgent, k_low, gap, stream)
    for _ in range(bound):
        engine.step()
    low = engine.trace.requests["low"]
    assert low.finish_reason is not None, (
        f"'low' (priority {priority}, aging {aging_rate:.1f}/s) still unfinished after "
        f"{bound} steps: only urgent requests that arrived in its first {horizon:.2f} s "
        f"may go first")
    assert engine.has_unfinished_requests(), "the urgent stream must still be running"


def test_without_aging_the_low_priority_request_starves(ex):
    """Bounded run: 600 steps of a never-empty urgent queue, and "low" never even starts."""
    engine, stream = low_under_urgent_stream(
        ex, aging_rate=0.0, priority=5, slots=2, k_urgent=4, k_low=3, gap=0.01,
        horizon_s=8.0)
    for _ in range(600):
        engine.step()
    assert engine.trace.steps[-1].num_waiting > 0, "urgent requests were queued all along"
    low = engine.trace.requests["low"]
    assert low.first_scheduled_time is None, "without aging 'low' must wait behind every urgent request"
    served = {e.request_id for s in engine.trace.steps for e in s.scheduled}
    assert len(served) >= 250
    # the same stream with aging: "low" is served early (the contrast the lesson draws)
    aged, _ = low_under_urgent_stream(
        ex, aging_rate=50.0, priority=5, slots=2, k_urgent=4, k_low=3, gap=0.01,
        horizon_s=8.0)
    for _ in range(600):
        aged.step()
    assert aged.trace.requests["low"].finish_reason is not None


# ---------------------------------------------------------------------- task 4: tenant quotas

def quota_scheduler(ex, quotas):
    return type("Quotas", (ex.TenantQuotaScheduler,), {"quotas": quotas})


def tenant_workload():
    """Tenant A floods 12 long requests at t = 0; tenant B sends one short request a second."""
    a = [RequestSpec(f"A-{i}", 16, 200, 200, 0.0, priority=0) for i in range(12)]
    b = [RequestSpec(f"B-{i}", 16, 10, 10, 1.0 + i, priority=0) for i in range(4)]
    return a + b


def test_quota_is_work_conserving_and_reclaims_slots_for_other_tenants(ex):
    """Simulator, 8 slots, A's quota 4: A alone fills all 8; each B request starts in the
    first step after it arrives (A's excess preempted); only A's sequences are preempted."""
    trace = simulate(tenant_workload(), scheduling=quota_scheduler(ex, {"A": 4}),
                     policy="priority", aging_rate=0.5, max_num_seqs=8, num_kv_blocks=512,
                     cost_model=FIXED_STEP, max_steps=20000)
    before_b = [s for s in trace.steps if s.end_time <= 1.0]
    assert max(len(s.scheduled) for s in before_b) == 8, "alone, A must use every free slot"
    for i in range(4):
        b = trace.requests[f"B-{i}"]
        assert b.first_scheduled_time - b.arrival_time <= 2 * STEP, \
            f"B-{i} waited {b.first_scheduled_time - b.arrival_time:.3f} s behind A's excess"
    preempted = {rid for s in trace.steps for rid in s.preempted}
    assert preempted and all(rid.startswith("A-") for rid in preempted), preempted
    assert all(r.finish_reason in ("stop", "length") for r in trace.requests.values())


def test_quota_holds_while_another_tenant_waits(ex):
    """Four slots for sixteen requests: while a B request waits, A runs at most 2; once
    B's are done, A takes every slot again."""
    a = [RequestSpec(f"A-{i}", 8, 40, 40, 0.0) for i in range(10)]
    b = [RequestSpec(f"B-{i}", 8, 40, 40, 0.0) for i in range(6)]
    trace = simulate(a + b, scheduling=quota_scheduler(ex, {"A": 2}), max_num_seqs=4,
                     num_kv_blocks=512, cost_model=FIXED_STEP, max_steps=20000)
    for step in trace.steps:
        running_a = sum(e.request_id.startswith("A-") for e in step.scheduled)
        b_waiting = any(r.request_id.startswith("B-") and (r.first_scheduled_time is None
                        or r.first_scheduled_time > step.start_time)
                        for r in trace.requests.values())
        if b_waiting:
            assert running_a <= 2, f"step {step.index}: A ran {running_a} while B waited"
    assert max(sum(e.request_id.startswith("A-") for e in s.scheduled) for s in trace.steps) == 4


def test_no_slot_idles_when_every_waiting_tenant_is_at_its_quota(ex):
    """Quotas A ≤ 2 and B ≤ 2 on 8 slots: both tenants at their quota may still fill the
    slots nobody under a quota wants."""
    work = [RequestSpec(f"{t}-{i}", 8, 30, 30, 0.0) for t in "AB" for i in range(6)]
    trace = simulate(work, scheduling=quota_scheduler(ex, {"A": 2, "B": 2}), max_num_seqs=8,
                     num_kv_blocks=512, cost_model=FIXED_STEP, max_steps=20000)
    first = [e.request_id for e in trace.steps[0].scheduled]
    assert len(first) == 8 and {r[0] for r in first} == {"A", "B"}, first


def test_victim_is_the_last_of_the_tenants_over_quota(ex):
    engine = make_sim_engine(scheduling=quota_scheduler(ex, {}), max_num_seqs=8,
                             num_kv_blocks=64)
    add_workload(engine, [RequestSpec("B-0", 4, 8, 8, 0.0), RequestSpec("A-0", 4, 8, 8, 0.0),
                          RequestSpec("A-1", 4, 8, 8, 0.0), RequestSpec("B-1", 4, 8, 8, 0.0)])
    engine.step()
    scheduler = engine.scheduler
    assert len(scheduler.running) == 4, "no quota: everyone runs"
    scheduler.quotas = {"A": 1}
    assert scheduler.victim(1.0).request_id == "A-1", "A is over its quota: its last goes"
    scheduler.quotas = {"A": 2}
    assert scheduler.victim(1.0).request_id == "B-1", "nobody over quota: the last of all"


def test_quota_in_the_real_engine_keeps_every_token(ex):
    """Tiny Llama, 4 slots, A's quota 2: both B requests run in the first step; the
    greedy tokens are the plain engine's."""
    prompts = [{"prompt_token_ids": [(7 * i + j) % 250 + 2 for j in range(5 + i)]} for i in range(8)]
    ids = [f"A-{i}" for i in range(6)] + ["B-0", "B-1"]
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    config = dict(max_num_seqs=4, block_size=4, num_kv_blocks=64, max_model_len=64)
    want = [o.outputs[0].token_ids for o in LLM(build_tiny_llama(seed=0), **config).generate(
        prompts, params, use_tqdm=False)]
    llm = LLM(build_tiny_llama(seed=0), scheduling=quota_scheduler(ex, {"A": 2}), **config)
    engine = llm.llm_engine
    for request_id, prompt in zip(ids, prompts):
        engine.add_request(request_id, prompt, params)
    outs = {}
    while engine.has_unfinished_requests():
        outs.update({o.request_id: o for o in engine.step() if o.finished})
    assert [outs[i].outputs[0].token_ids for i in ids] == want, "quotas must never change tokens"
    first = {e.request_id for e in engine.trace.steps[0].scheduled}
    assert {"B-0", "B-1"} <= first and sum(r.startswith("A-") for r in first) == 2, first
