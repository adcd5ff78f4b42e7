"""The record of a run: one row per engine step, one row per request.

The Trace is the single source for every metric (see `metrics.py`) and every chart
and widget: the slot charts, the KV block map, the timelines. The real engine and the
simulator write the same Trace, so a widget can replay either.

A step row says which sequences ran and how many prefill / decode tokens each ran,
who was preempted, which batch slots sat idle, how full the KV cache was, and how long
the step took. A request row holds the timestamps the latency metrics need.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


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

    @property
    def num_busy_slots(self) -> int:
        return len(self.scheduled)


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


@dataclass
class Trace:
    config: dict = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    requests: dict[str, RequestRecord] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"config": self.config,
                "steps": [asdict(s) for s in self.steps],
                "requests": {k: asdict(r) for k, r in self.requests.items()}}

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
        return cls(config=dict(data["config"]), steps=steps, requests=requests)

    @property
    def duration(self) -> float:
        if not self.steps:
            return 0.0
        start = min(r.arrival_time for r in self.requests.values()) if self.requests else 0.0
        return self.steps[-1].end_time - min(start, self.steps[0].start_time)
