"""A Trace laid out for the eye: batch slots × steps, and the KV blocks of every step.

Every view in the course (the slot grids, the engine stepper, the KV block map) reads
the Trace through this file, so they all tell the same story.

**Slots.** A Trace says which requests ran in each step, not which *slot* they sat in:
a slot is one of the `max_num_seqs` rows of the batch. The layout follows the engine:

* a request takes the lowest free slot at the first step it appears in (scheduled, or
  idle);
* it keeps that slot while it is in the batch: also in a step where it runs no token
  (a running sequence the token budget skipped: "held"), and, in a static batch, after
  it has finished ("idle"), until the whole batch ends;
* it leaves when it is absent from a step after it finished (so a continuous slot is
  refilled by the head of the queue at the very next step), or at the step it is
  preempted.

**Blocks.** With `record_block_tables=True` every step row holds `{request id: [physical
block ids]}` of the sequences holding KV blocks after the step; `block_map` turns that
into who owns each block and how many of its token slots hold a token.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from minillm.engine.trace import Trace
from minillm.sim.metrics import summarize

# what a slot does in one step
EMPTY, PREFILL, DECODE, IDLE, HELD = range(5)
STATE_NAMES = ("empty", "prefill", "decode", "idle", "held")
FREE = -1                              # owner code of a block no request holds


def slot_assignments(trace: Trace) -> list[dict[str, int]]:
    """`{request id: slot}` of every request in the batch, one dict per step (the rule above)."""
    requests, slot_of, out = trace.requests, {}, []
    for step in trace.steps:
        present = [e.request_id for e in step.scheduled] + list(step.idle)
        for rid in [r for r in slot_of if r not in present]:
            if _left(requests.get(rid), rid, step):
                del slot_of[rid]
        for rid in present:
            if rid not in slot_of:
                taken = set(slot_of.values())
                slot_of[rid] = next(k for k in range(len(taken) + 1) if k not in taken)
        out.append(dict(slot_of))
    return out


def _left(record, request_id: str, step) -> bool:
    """Has a request absent from `step` left the batch (finished before it, or preempted)?"""
    if request_id in step.preempted or record is None:       # None: a bounded Trace dropped it
        return True
    return record.finish_time is not None and record.finish_time <= step.start_time


def slot_layout(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(states, owners), both [num_slots, num_steps].

    states: EMPTY / PREFILL / DECODE / IDLE / HELD of each slot at each step; owners:
    the index (in order of first appearance) of the request in the slot, -1 if empty.
    """
    assignments = slot_assignments(trace)
    height = max([s.num_slots for s in trace.steps]
                 + [k + 1 for slots in assignments for k in slots.values()], default=0)
    states = np.full((height, len(trace.steps)), EMPTY, dtype=np.int8)
    owners = np.full((height, len(trace.steps)), -1, dtype=np.int64)
    index: dict[str, int] = {}
    for t, (step, slots) in enumerate(zip(trace.steps, assignments)):
        doing = step_states(step)
        for rid, k in slots.items():
            states[k, t] = doing.get(rid, HELD)
            owners[k, t] = index.setdefault(rid, len(index))
    return states, owners


def step_states(step) -> dict[str, int]:
    """What the requests listed in `step` do: PREFILL, DECODE or IDLE. A request in the
    batch but not listed is HELD."""
    states = {rid: IDLE for rid in step.idle}
    states.update((e.request_id, PREFILL if e.num_prefill_tokens else DECODE)
                  for e in step.scheduled)
    return states


def slot_numbers(trace: Trace) -> dict:
    """The slot accounting of a Trace (`metrics.summarize`), times in the Trace's seconds.

    `idle_fraction` = 1 − busy slot-steps / all slot-steps, split into slot-steps held by
    a finished row (`held_idle_fraction`) and the rest (`empty_fraction`: empty slots,
    and the rare slot whose running sequence sat out the step).
    """
    s = summarize(trace)
    held = sum(len(step.idle) for step in trace.steps)
    total = s["slot_steps"]
    share = (lambda n: n / total) if total else (lambda n: float("nan"))
    return {
        "num_requests": s["num_requests"], "iterations": s["num_steps"],
        "slot_iterations": total, "useful": s["busy_slot_steps"],
        "idle_fraction": 1 - s["slot_utilization"] if total else float("nan"),
        "held_idle_fraction": share(held),
        "empty_fraction": share(total - s["busy_slot_steps"] - held),
        "duration_s": s["duration_s"], "tokens_per_s": s["generated_tokens_per_s"],
        "e2e_p50": s["e2e_p50"], "e2e_p99": s["e2e_p99"],
        "ttft_p50": s["ttft_p50"], "ttft_p99": s["ttft_p99"],
    }


@dataclass
class SlotView:
    """One batch slot at one step."""

    slot: int
    request_id: str | None = None
    state: int = EMPTY
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    context_len: int = 0                # tokens in the KV cache after the step
    tokens_generated: int = 0           # this request's output tokens so far

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]


@dataclass
class StepView:
    """Everything the stepper says about one step (every number from the Trace)."""

    index: int
    start_time: float
    end_time: float
    slots: list[SlotView]
    running: list[str]                  # scheduled this step, in slot order
    idle: list[str]                     # finished rows still holding a slot (static)
    preempted: list[str]
    waiting: list[str]                  # arrived, not in the batch, in arrival order
    num_prefill_tokens: int
    num_decode_tokens: int
    tokens_generated: int               # all requests, by the end of this step
    kv_blocks_used: int
    kv_blocks_free: int

    @property
    def queue_length(self) -> int:
        return len(self.waiting)

    @property
    def num_kv_blocks(self) -> int:
        return self.kv_blocks_used + self.kv_blocks_free


def replay(trace: Trace) -> list[StepView]:
    """One StepView per step: the slots (the rule above), the queue, the token counts.

    The queue holds the requests that have arrived by the step's start and are not in
    the batch, as the Trace's `num_waiting` does (the scheduler's waiting queue).
    """
    if not trace.steps:
        raise ValueError("the trace has no steps: run something first")
    requests = trace.requests
    token_times = sorted(t for r in requests.values() for t in r.token_times)
    order = {rid: k for k, rid in enumerate(requests)}        # the order requests were added
    arrivals = sorted(requests.values(), key=lambda r: (r.arrival_time, order[r.request_id]))
    context: dict[str, int] = {}                              # last known context length
    views = []
    for step, slot_of in zip(trace.steps, slot_assignments(trace)):
        context.update((e.request_id, e.context_len) for e in step.scheduled)
        slots = _slot_views(step, slot_of, context, requests)
        waiting = [r.request_id for r in arrivals
                   if r.arrival_time <= step.start_time and r.request_id not in slot_of
                   and not (r.finish_time is not None and r.finish_time <= step.start_time)]
        views.append(StepView(
            index=step.index, start_time=step.start_time, end_time=step.end_time, slots=slots,
            running=[s.request_id for s in slots if s.state in (PREFILL, DECODE)],
            idle=list(step.idle), preempted=list(step.preempted), waiting=waiting,
            num_prefill_tokens=step.num_prefill_tokens, num_decode_tokens=step.num_decode_tokens,
            tokens_generated=bisect.bisect_right(token_times, step.end_time),
            kv_blocks_used=step.kv_blocks_used, kv_blocks_free=step.kv_blocks_free))
    return views


def _slot_views(step, slot_of: dict[str, int], context, requests) -> list[SlotView]:
    num_slots = max([step.num_slots, *(k + 1 for k in slot_of.values())])
    slots = [SlotView(k) for k in range(num_slots)]
    scheduled = {e.request_id: e for e in step.scheduled}
    doing = step_states(step)
    for rid, k in slot_of.items():
        view = slots[k]
        view.request_id, view.context_len = rid, context.get(rid, 0)
        view.state = doing.get(rid, HELD)
        record = requests.get(rid)
        if record is not None:      # output tokens produced by the end of this step
            view.tokens_generated = bisect.bisect_right(record.token_times, step.end_time)
        if rid in scheduled:
            view.num_prefill_tokens = scheduled[rid].num_prefill_tokens
            view.num_decode_tokens = scheduled[rid].num_decode_tokens
    return slots


def short_id(request_id: str) -> str:
    """'req-7' or 'ab12cd34-7' (llm.generate's ids) → 'r7'; other ids are cut to 8 chars."""
    head, _, tail = request_id.rpartition("-")
    if head and tail.isdigit():
        return "r" + tail
    return request_id[:8]


@dataclass
class BlockMap:
    """What every KV block held after every step of a Trace.

    owners[s, b]: index into `request_ids` of the request holding block b after step s,
    or FREE; tokens[s, b]: how many of the block's `block_size` slots hold a token.
    """

    trace: Trace
    owners: np.ndarray                 # [steps, num_blocks] int
    tokens: np.ndarray                 # [steps, num_blocks] int
    request_ids: list[str]
    block_size: int
    name: str = ""

    @property
    def num_steps(self) -> int:
        return self.owners.shape[0]

    @property
    def num_blocks(self) -> int:
        return self.owners.shape[1]

    def lost(self, step: int) -> np.ndarray | None:
        """Blocks freed at `step` because their owner was preempted (bool [num_blocks])."""
        preempted = self.trace.steps[step].preempted
        if step == 0 or not preempted:
            return None
        victims = [self.request_ids.index(r) for r in preempted if r in self.request_ids]
        return np.isin(self.owners[step - 1], victims) & (self.owners[step] == FREE)


def block_map(trace: Trace, name: str = "") -> BlockMap:
    """The BlockMap of a Trace recorded with `record_block_tables=True`.

    A block's tokens: logical block j of a sequence with `n` computed tokens holds
    `min(block_size, n - j * block_size)` of them. A block shared through the prefix
    cache is drawn for one of its owners, as full as its fullest sharer (as the Trace's
    `kv_tokens_held` counts it).
    """
    if not trace.steps:
        raise ValueError("the trace has no steps: run something first")
    if any(s.block_tables is None for s in trace.steps):
        raise ValueError("this Trace has no block tables, so which request holds which KV "
                         "block is unknown: record them with LLM(..., record_block_tables=True), "
                         "simulate(..., record_block_tables=True) or "
                         "make_sim_engine(..., record_block_tables=True)")
    bs = trace.config.get("block_size") or 1
    first = trace.steps[0]
    shape = (len(trace.steps), first.kv_blocks_used + first.kv_blocks_free)
    owners = np.full(shape, FREE, dtype=np.int32)
    tokens = np.zeros(shape, dtype=np.int32)
    index: dict[str, int] = {}
    context: dict[str, int] = {}                              # computed tokens, last known
    for s, step in enumerate(trace.steps):
        context.update((e.request_id, e.context_len) for e in step.scheduled)
        for rid, table in step.block_tables.items():
            k = index.setdefault(rid, len(index))
            held = context.get(rid, 0)
            for j, block in enumerate(table):
                owners[s, block] = k
                tokens[s, block] = max(tokens[s, block], min(bs, max(0, held - j * bs)))
    return BlockMap(trace, owners, tokens, list(index), bs, name)


def as_block_map(value, name: str = "") -> BlockMap:
    """A BlockMap as it is (renamed if `name`), or the BlockMap of a Trace."""
    if isinstance(value, BlockMap):
        return BlockMap(value.trace, value.owners, value.tokens, value.request_ids,
                        value.block_size, name or value.name)
    if isinstance(value, Trace):
        return block_map(value, name)
    raise TypeError(f"expected a BlockMap or a Trace, got {type(value).__name__}")
