"""What every scheduler shares: limits, queues, ordering, and the plan it hands out.

Each engine step asks the scheduler one question: *which sequences run now, and how
many of their tokens?* The answer is a `SchedulerOutput` — a list of
`(sequence, num_new_tokens)` pairs plus the sequences it had to preempt. The model
runner turns that list into one flat batch; the simulator turns it into a step time.

Schedulers are pure Python and deterministic (no torch, no wall clock of their own:
the engine passes `now` in), so the very same code drives the real model, the
simulator behind the widgets, and the property tests.

Two families live in their own files:

* `StaticScheduler` (request-level, 静态批处理): a batch is formed, runs until its
  longest member finishes, and only then is the next batch formed;
* `ContinuousScheduler` (iteration-level, 迭代级调度 / continuous batching 连续批处理):
  every step, finished sequences leave and waiting ones join — optionally with
  chunked prefill (分块预填充).

Ordering is a policy (`policies.py`): "fcfs", "priority" (+ aging), "shortest".

When a sequence must be preempted, the victim is the *last* in that order among the
running ones: lowest priority first, then latest arrival.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from minillm.engine.checks import InvalidValue
from minillm.engine.sequence import Sequence, SequenceStatus
from minillm.kv_cache import KVCacheManager, cdiv
from minillm.scheduler.policies import resolve_policy

if TYPE_CHECKING:
    from minillm.config import EngineConfig

PREEMPTION_MODES = ("recompute", "swap")


@dataclass(frozen=True)
class KVUsage:
    blocks_used: int
    blocks_free: int
    tokens_held: int          # token slots of the used blocks that hold a computed token


@dataclass
class ScheduledSequence:
    """One row of a step's plan: run `num_new_tokens` tokens of `seq`."""

    seq: Sequence
    num_new_tokens: int
    is_decode: bool              # True: one new token after a completed prefill

    @property
    def samples(self) -> bool:
        """True if this step completes the sequence's known tokens, so it samples."""
        return self.seq.num_computed_tokens + self.num_new_tokens >= self.seq.num_tokens

    @property
    def num_drafts(self) -> int:
        """Speculative guesses run in this row (after the sequence's known tokens)."""
        return max(0, self.seq.num_computed_tokens + self.num_new_tokens - self.seq.num_tokens)


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    idle: list[Sequence] = field(default_factory=list)   # static: finished rows kept
    num_slots: int = 0                                   # batch slots this step
    swap_out: list[tuple[int, int]] = field(default_factory=list)  # (device, swap) blocks
    swap_in: list[tuple[int, int]] = field(default_factory=list)   # (swap, device) blocks

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler(abc.ABC):
    """Queues + limits + ordering; subclasses decide what runs each step."""

    name = "base"
    kv_layout = "paged"          # or "contiguous": one reservation per request at admission

    def __init__(self, config: "EngineConfig", kv: KVCacheManager):
        """`config`: the engine's knobs, complete (`EngineConfig.for_model`); a scheduler
        reads its limits (max_num_seqs, max_num_batched_tokens, max_model_len), policy,
        aging_rate, enable_chunked_prefill and preemption_mode."""
        if config.max_model_len is None or config.max_num_batched_tokens is None:
            raise ValueError("a scheduler needs max_model_len and max_num_batched_tokens: give "
                             "them to EngineConfig, or complete it with config.for_model(...)")
        self.config = config
        self.kv = kv
        self._order = resolve_policy(config.policy)      # the policy's key function
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self._next_order = 0
        self._swap_out: list[tuple[int, int]] = []    # copies the runner must do this step

    def check_fits(self, seq: Sequence) -> None:
        """Reject a request that could never be served, instead of letting it wait forever."""
        cfg = self.config
        if seq.num_prompt_tokens >= cfg.max_model_len:
            raise InvalidValue(
                f"prompt has {seq.num_prompt_tokens} tokens but max_model_len is "
                f"{cfg.max_model_len}: shorten the prompt or raise max_model_len", "prompt",
                code="context_length_exceeded")
        needed = self.worst_case_blocks(seq)
        if needed > self.kv.num_blocks:
            raise InvalidValue(
                f"this request needs up to {needed} KV blocks "
                f"({seq.num_prompt_tokens} prompt + {seq.params.max_tokens} max_tokens, "
                f"block_size {self.kv.block_size}) but the whole cache has "
                f"{self.kv.num_blocks}: lower max_tokens, shorten the prompt, or raise "
                f"num_kv_blocks", "max_tokens")
        if not cfg.enable_chunked_prefill and seq.num_prompt_tokens > cfg.max_num_batched_tokens:
            raise InvalidValue(
                f"prompt has {seq.num_prompt_tokens} tokens but max_num_batched_tokens is "
                f"{cfg.max_num_batched_tokens} and chunked prefill is off: raise "
                f"max_num_batched_tokens or set enable_chunked_prefill=True", "prompt")

    def worst_case_blocks(self, seq: Sequence) -> int:
        """KV blocks `seq` can ever need: its worst case, rounded up to whole blocks."""
        return cdiv(self.worst_case_tokens(seq), self.kv.block_size)

    def worst_case_tokens(self, seq: Sequence) -> int:
        """The most tokens `seq` can ever hold: prompt + max_tokens, capped by max_model_len."""
        return min(seq.max_total_tokens, self.config.max_model_len)

    def add(self, seq: Sequence) -> None:
        """Queue `seq` (the engine already ran `check_fits` on it)."""
        seq.admission_order = self._next_order
        self._next_order += 1
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def abort(self, request_id: str) -> Sequence | None:
        """Remove a request wherever it is and free its blocks."""
        for queue in (self.waiting, self.running):
            for seq in queue:
                if seq.request_id == request_id:
                    queue.remove(seq)
                    self.kv.free(seq)
                    if seq.is_swapped:
                        self.kv.free_swapped(seq)
                    seq.status = SequenceStatus.FINISHED
                    seq.finish_reason = "abort"
                    return seq
        return None

    def finish(self, seq: Sequence) -> None:
        """The engine saw `seq` stop: it leaves the batch and its blocks are freed."""
        self.running.remove(seq)
        self.kv.free(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def kv_holders(self) -> list[Sequence]:
        """Sequences that hold KV blocks right now."""
        return self.running

    def kv_usage(self) -> KVUsage:
        """How full the KV cache is: blocks used / free, token slots holding a token."""
        return KVUsage(self.kv.num_blocks - self.kv.num_free_blocks, self.kv.num_free_blocks,
                       self.kv.tokens_held(self.kv_holders()))

    def tokens_computed(self, seq: Sequence) -> None:
        """After a step: `seq`'s newly computed tokens may fill blocks worth caching."""
        self.kv.on_tokens_computed(seq)

    def order_key(self, seq: Sequence, now: float) -> tuple:
        """Sort key of the configured policy (`policies.py`): smaller runs first."""
        return self._order(seq, now, self.config.aging_rate)

    def ordered_waiting(self, now: float) -> list[Sequence]:
        return sorted(self.waiting, key=lambda s: self.order_key(s, now))

    def preempt(self, seq: Sequence) -> None:
        """Take `seq` out of the batch and queue it again, freeing its KV blocks.

        "recompute": forget its K/V; on return, prompt + generated tokens are prefilled
        again. "swap": copy its K/V blocks to swap space (the runner does the copy this
        step) and copy them back on return; falls back to recompute when swap space
        is full.
        """
        self.running.remove(seq)
        seq.draft_token_ids = []
        if self.config.preemption_mode == "swap":
            mapping = self.kv.swap_out(seq)
            if mapping is not None:
                self._swap_out.extend(mapping)
                seq.mark_swapped_out()
                self.waiting.append(seq)
                return
        self.kv.free(seq)
        seq.reset_for_recompute()
        self.waiting.append(seq)

    def take_swap_out(self) -> list[tuple[int, int]]:
        """The swap-out copies decided so far this step (and forget them)."""
        copies, self._swap_out = self._swap_out, []
        return copies

    def start_running(self, seq: Sequence, now: float) -> None:
        """Move `seq` from the waiting queue into the batch (and stamp its first schedule)."""
        self.waiting.remove(seq)
        self.running.append(seq)
        seq.status = SequenceStatus.RUNNING
        if seq.first_scheduled_time is None:
            seq.first_scheduled_time = now

    @abc.abstractmethod
    def schedule(self, now: float) -> SchedulerOutput:
        """Decide this step's plan; called once per engine step."""


def scheduled_row(seq: Sequence, num_new_tokens: int) -> ScheduledSequence:
    """Build a plan row, marking steps that continue after the prompt as decodes.

    A decode runs the newest token, plus any speculative guesses that fit; guesses the
    budget cut off are dropped here.
    """
    is_decode = seq.num_output_tokens > 0 and seq.num_computed_tokens == seq.num_tokens - 1
    keep = max(0, seq.num_computed_tokens + num_new_tokens - seq.num_tokens)
    del seq.draft_token_ids[keep:]
    return ScheduledSequence(seq, num_new_tokens, is_decode)
