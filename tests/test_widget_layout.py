"""One slot rule for every view, and it is the engine's: checked against the block tables."""

from __future__ import annotations

import pytest

from minillm.sim.simulate import simulate
from minillm.sim.workload import RequestSpec, chat_burst
from minillm.widgets.layout import HELD, STATE_NAMES, block_map, slot_assignments, slot_layout
from minillm.widgets.stepper import EngineStepper

pytestmark = pytest.mark.unit

LENGTHS = (3, 6, 4, 2, 5, 9, 1, 7)


def simulated(scheduling="continuous", **knobs):
    specs = [RequestSpec(f"req-{i}", 4 + 3 * i, n, n) for i, n in enumerate(LENGTHS)]
    config = dict(max_num_seqs=3, block_size=4, num_kv_blocks=40)
    return simulate(specs, scheduling=scheduling, record_block_tables=True, **{**config, **knobs})


@pytest.fixture(scope="module")
def held_trace():
    """A real (tiny random Llama) run in which running sequences sit out steps: speculative
    guesses use up a 2-token budget, so a mid-prompt sequence is skipped but keeps its
    slot and its blocks."""
    from minillm import LLM, SamplingParams
    from minillm.model.tiny import build_tiny_llama
    llm = LLM(build_tiny_llama(seed=0), max_num_seqs=3, block_size=4, num_kv_blocks=32,
              enable_chunked_prefill=True, max_num_batched_tokens=2,
              speculative_config={"num_speculative_tokens": 2}, record_block_tables=True)
    prompts = [{"prompt_token_ids": [3, 4, 5, 3, 4, 5, 3, 4][:5 + i]} for i in range(4)]
    llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True),
                 use_tqdm=False)
    return llm.trace


TRACES = {
    "static": lambda: simulated("static"),
    "continuous": lambda: simulated(),
    "static+paged": lambda: simulated("static+paged"),
    "preempting": lambda: simulated(num_kv_blocks=9),
    "swapping": lambda: simulated(num_kv_blocks=9, preemption_mode="swap", num_swap_blocks=32),
    "chunked": lambda: simulated(max_num_seqs=4, enable_chunked_prefill=True,
                                 max_num_batched_tokens=8),
    "prefix cache": lambda: simulate(chat_burst(8, 32), max_num_seqs=4, block_size=4,
                                     num_kv_blocks=120, enable_prefix_caching=True,
                                     record_block_tables=True),
}


def some_trace(name, request):
    return request.getfixturevalue("held_trace") if name == "held" else TRACES[name]()


@pytest.mark.parametrize("name", [*TRACES, "held"])
def test_stepper_and_slot_grid_assign_the_same_slots(name, request):
    trace = some_trace(name, request)
    states, owners = slot_layout(trace)                  # what the slot-waste grid draws
    stepper = EngineStepper(trace)
    pairs = set()                                        # (request id, grid owner index)
    for k, view in enumerate(stepper.views):             # what the stepper shows at step k
        shown = {s.slot: s for s in view.slots}
        for slot in range(states.shape[0]):
            rid = shown[slot].request_id if slot in shown else None
            assert (rid is None) == (owners[slot, k] < 0), (k, slot)
            assert (shown[slot].state_name if slot in shown else "empty") \
                == STATE_NAMES[states[slot, k]], (k, slot)
            if rid is not None:
                pairs.add((rid, int(owners[slot, k])))
    for k in (0, len(trace.steps) // 2, len(trace.steps) - 1):   # … and puts on screen
        stepper.go(k)
        assert stepper.result["slots"] == {s.slot: s.request_id for s in stepper.views[k].slots}
    assert len({r for r, _ in pairs}) == len({o for _, o in pairs}) == len(pairs)
    if name == "held":
        assert (states == HELD).any(), "this run should have a running sequence sit out a step"


@pytest.mark.parametrize("name", [*TRACES, "held"])
def test_the_slot_layout_follows_the_engines_block_tables(name, request):
    """After every step, the requests in a slot are exactly the ones holding KV blocks,
    plus those that finished in that step (their blocks already went back)."""
    trace = some_trace(name, request)
    for step, slots in zip(trace.steps, slot_assignments(trace)):
        holders = set(step.block_tables)
        assert holders <= set(slots), step.index
        for rid in set(slots) - holders:
            finish = trace.requests[rid].finish_time
            assert finish is not None and finish <= step.end_time, (step.index, rid)
        assert not set(step.preempted) & set(slots), step.index
    blocks = block_map(trace)
    assert [int((o >= 0).sum()) for o in blocks.owners] == [s.kv_blocks_used for s in trace.steps]
    if name in ("preempting", "swapping"):
        assert any(s.preempted for s in trace.steps)


def test_a_slot_is_refilled_at_the_step_after_its_request_finishes():
    trace = simulated()
    assignments = slot_assignments(trace)
    for k, (step, slots) in enumerate(zip(trace.steps, assignments)):
        for rid in slots:
            finish = trace.requests[rid].finish_time
            if finish is not None and finish <= step.end_time and k + 1 < len(trace.steps):
                assert rid not in assignments[k + 1]
    waited = [r for r in trace.requests.values() if r.first_scheduled_time > 0]
    assert waited, "with 8 requests on 3 slots some must queue"
