"""The record of a run: one row per engine step, one row per request.

The Trace is the single source for every metric (see `minillm/sim/metrics.py`) and every chart
and widget: the slot charts, the KV block map, the timelines. The real engine and the
simulator write the same Trace, so a widget can replay either.

A step row says which sequences ran and how many prefill / decode tokens each ran,
who was preempted, which batch slots sat idle, how full the KV cache was, how long the
step took — and, with `record_block_tables=True`, which physical KV blocks each
sequence held (what the KV-map widgets draw). A request row holds the timestamps the
latency metrics need.

**Bounded.** An engine that serves for hours must not grow without limit: the Trace
keeps the newest `max_steps` step rows (None keeps all) and, once the finished request
rows outnumber it too, drops the oldest finished ones. `num_dropped_steps` says how many
went; step rows keep their running `index`. A `generate()` call starts a fresh Trace,
so lessons see every step of their runs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

_TRIM_SLACK = 1.25     # trim once 25 % over the cap, so trimming costs O(1) per step


@dataclass
class ScheduledEntry:
    request_id: str
    num_prefill_tokens: int
    num_decode_tokens: int
    context_len: int                 # tokens in the cache after this step


@dataclass
class StepRecord:
    index: int
    start_time: float
    end_time: float
    scheduled: list[ScheduledEntry]
    preempted: list[str]
    idle: list[str]                  # static batching: finished rows still holding a slot
    num_slots: int                   # batch slots available (max_num_seqs)
    num_waiting: int                 # queued after scheduling
    kv_blocks_used: int
    kv_blocks_free: int
    kv_tokens_held: int              # slots of used blocks that hold a token
    num_swapped_out_blocks: int = 0  # blocks copied to swap space this step
    num_swapped_in_blocks: int = 0   # blocks copied back this step
    block_tables: dict[str, list[int]] | None = None   # request id -> its KV blocks (if recorded)

    @property
    def duration(self) -> float:
        return self.end_time - self.start_time

    @property
    def num_prefill_tokens(self) -> int:
        return sum(e.num_prefill_tokens for e in self.scheduled)

    @property
    def num_decode_tokens(self) -> int:
        return sum(e.num_decode_tokens for e in self.scheduled)

    @property
    def num_batched_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens


@dataclass
class RequestRecord:
    request_id: str
    arrival_time: float
    prompt_len: int
    max_tokens: int
    priority: int = 0
    output_len: int = 0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    num_preemptions: int = 0
    finish_reason: str | None = None
    num_cached_tokens: int = 0       # prompt tokens served from the prefix cache
    num_draft_proposed: int = 0      # speculative guesses run through the model
    num_draft_accepted: int = 0      # … and kept because the model agreed
    error: str | None = None         # why it failed (finish_reason "error")


@dataclass
class Trace:
    config: dict = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    max_steps: int | None = None          # keep only the newest steps (None: all)
    record_block_tables: bool = False     # store each step's block tables
    num_dropped_steps: int = 0

    def add_step(self, step: StepRecord) -> None:
        step.index = self.num_dropped_steps + len(self.steps)
        self.steps.append(step)
        cap = self.max_steps
        if cap is not None and len(self.steps) > cap * _TRIM_SLACK:
            drop = len(self.steps) - cap
            del self.steps[:drop]
            self.num_dropped_steps += drop

    def add_request(self, record: RequestRecord) -> None:
        """Add or update a request's row (an update keeps the row's place)."""
        self.requests[record.request_id] = record
        cap = self.max_steps
        if cap is not None and len(self.requests) > cap * _TRIM_SLACK:
            finished = [rid for rid, r in self.requests.items() if r.finish_time is not None]
            for rid in finished[:len(self.requests) - cap]:
                del self.requests[rid]

    def to_dict(self) -> dict:
        return {"config": self.config,
                "steps": [asdict(s) for s in self.steps],
                "requests": {k: asdict(r) for k, r in self.requests.items()},
                "num_dropped_steps": self.num_dropped_steps}

    def to_json(self, path=None) -> str:
        text = json.dumps(self.to_dict())
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        steps = [StepRecord(**{**s, "scheduled": [ScheduledEntry(**e) for e in s["scheduled"]]})
                 for s in data["steps"]]
        requests = {k: RequestRecord(**r) for k, r in data["requests"].items()}
        return cls(config=dict(data["config"]), steps=steps, requests=requests,
                   num_dropped_steps=data.get("num_dropped_steps", 0))

    @property
    def duration(self) -> float:
        if not self.steps:
            return 0.0
        start = min(r.arrival_time for r in self.requests.values()) if self.requests else 0.0
        return self.steps[-1].end_time - min(start, self.steps[0].start_time)


def record_step(plan, start: float, end: float, *, num_waiting: int, kv,
                holders=None) -> StepRecord:
    """The Trace row of one engine step. `kv`: the scheduler's `KVUsage` after the step;
    `holders`: the sequences holding KV blocks, when block tables are recorded."""
    entries = []
    for item in plan.scheduled:
        decode = item.num_new_tokens if item.is_decode else 0
        entries.append(ScheduledEntry(item.seq.request_id, item.num_new_tokens - decode,
                                      decode, item.seq.num_computed_tokens))
    tables = None if holders is None else {s.request_id: list(s.block_table) for s in holders}
    return StepRecord(
        index=-1, start_time=start, end_time=end, scheduled=entries,
        preempted=[s.request_id for s in plan.preempted],
        idle=[s.request_id for s in plan.idle], num_slots=plan.num_slots,
        num_waiting=num_waiting, kv_blocks_used=kv.blocks_used, kv_blocks_free=kv.blocks_free,
        kv_tokens_held=kv.tokens_held, num_swapped_out_blocks=len(plan.swap_out),
        num_swapped_in_blocks=len(plan.swap_in), block_tables=tables)


def record_request(seq) -> RequestRecord:
    """The Trace row of one request, from its Sequence."""
    return RequestRecord(
        request_id=seq.request_id, arrival_time=seq.arrival_time,
        prompt_len=seq.num_prompt_tokens, max_tokens=seq.params.max_tokens,
        priority=seq.priority, output_len=seq.num_output_tokens,
        first_scheduled_time=seq.first_scheduled_time, first_token_time=seq.first_token_time,
        finish_time=seq.finish_time, token_times=list(seq.token_times),
        num_preemptions=seq.num_preemptions, finish_reason=seq.finish_reason,
        num_cached_tokens=seq.num_cached_tokens, num_draft_proposed=seq.num_draft_proposed,
        num_draft_accepted=seq.num_draft_accepted, error=seq.error)
