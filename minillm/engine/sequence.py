"""One request as the engine sees it while it is being served.

A `Sequence` is the token list of one request (prompt + what has been generated so far)
plus the bookkeeping every other part of the engine needs:

* the **status** — WAITING in the queue, RUNNING in the batch, FINISHED;
  a sequence that is preempted goes back to WAITING and is counted in
  `num_preemptions`;
* `num_computed_tokens` — how many of its tokens already have their keys and values in
  the KV cache. The tokens still to run through the model are
  `all_token_ids[num_computed_tokens:]`: the whole prompt before the first step, one
  token per decode step, a *chunk* of the prompt under chunked prefill, and the whole
  prompt + generated text again after a preemption by recompute;
* the **block table** — which physical KV-cache blocks hold its tokens, in order;
* timestamps for the metrics (TTFT, TPOT, ITL, E2E latency).

Nothing here touches torch: the scheduler and the simulator use sequences too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from minillm.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"      # queued: not admitted yet, or preempted and re-queued
    RUNNING = "running"      # in the batch: gets tokens scheduled every step
    FINISHED = "finished"    # done (stop, length or abort); its blocks are freed


@dataclass(eq=False)          # identity, not field-by-field: `seq in running` stays O(1) per item
class Sequence:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float = 0.0
    priority: int = 0                      # lower value = served first (vLLM's rule)
    prompt: str | None = None
    eos_token_ids: tuple[int, ...] = ()   # any of them ends the request (unless ignore_eos)

    output_token_ids: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    swap_table: list[int] = field(default_factory=list)   # swap-space blocks while swapped out
    num_cached_tokens: int = 0             # prompt tokens found in the prefix cache
    draft_token_ids: list[int] = field(default_factory=list)  # speculative guesses this step
    num_draft_proposed: int = 0
    num_draft_accepted: int = 0
    finish_reason: str | None = None       # "stop" | "length" | "abort" | "error"
    error: str | None = None               # what went wrong, when finish_reason is "error"
    num_preemptions: int = 0
    admission_order: int = 0               # set by the scheduler: FCFS tie-breaker
    sampling_seed: int = 0                 # set by the engine (sampling_params.request_seed)

    # timestamps on the engine clock (seconds)
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    token_times: list[float] = field(default_factory=list)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt + generated tokens: the length the KV cache must reach."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_ids_between(self, start: int, end: int) -> list[int]:
        """Tokens at positions [start, end) of prompt + output + this step's guesses.

        Slices each list on its own, so a decode step copies one token, not the whole
        sequence."""
        p = self.num_prompt_tokens
        o = p + len(self.output_token_ids)
        return (self.prompt_token_ids[start:min(end, p)]
                + self.output_token_ids[max(start - p, 0):max(end - p, 0)]
                + self.draft_token_ids[max(start - o, 0):max(end - o, 0)])

    @property
    def num_uncomputed_tokens(self) -> int:
        """Tokens whose K/V are not in the cache yet (what the next step must run)."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def num_tokens_to_run(self) -> int:
        """What the next step wants to run: uncomputed tokens + speculative guesses."""
        return self.num_uncomputed_tokens + len(self.draft_token_ids)

    @property
    def in_prefill(self) -> bool:
        """True while more than one token is uncomputed (first prefill or a recompute)."""
        return self.num_uncomputed_tokens > 1

    @property
    def max_total_tokens(self) -> int:
        """Worst-case length: what a contiguous reservation must hold."""
        return self.num_prompt_tokens + self.params.max_tokens

    @property
    def is_swapped(self) -> bool:
        return bool(self.swap_table)

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_token(self, token_id: int, now: float) -> None:
        """Record one generated token and when it was produced."""
        self.output_token_ids.append(token_id)
        self.token_times.append(now)
        if self.first_token_time is None:
            self.first_token_time = now

    def check_stop(self, max_model_len: int) -> str | None:
        """Why this sequence should stop after its newest token, or None to go on.

        Any EOS id stops unless `ignore_eos` (a model may have several, like Llama 3's
        end-of-text and end-of-turn); any of `stop_token_ids` stops; reaching
        `max_tokens` or the model's context length stops with "length".
        """
        if not self.output_token_ids:
            return None
        last = self.output_token_ids[-1]
        if not self.params.ignore_eos and last in self.eos_token_ids:
            return "stop"
        if self.params.stop_token_ids and last in self.params.stop_token_ids:
            return "stop"
        if self.num_output_tokens >= self.params.max_tokens:
            return "length"
        if self.num_tokens >= max_model_len:
            return "length"
        return None

    def shift_times(self, delta: float) -> None:
        """Move every timestamp by `delta` seconds (the engine clock was restarted)."""
        self.arrival_time += delta
        for name in ("first_scheduled_time", "first_token_time", "finish_time"):
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name) + delta)
        self.token_times = [t + delta for t in self.token_times]

    def mark_swapped_out(self) -> None:
        """Preemption by swapping: the K/V wait in swap space; nothing is recomputed."""
        self.status = SequenceStatus.WAITING
        self.num_preemptions += 1

    def reset_for_recompute(self) -> None:
        """Preemption by recompute: forget the cached K/V, keep the generated tokens.

        When the sequence is admitted again, its prompt *and* everything it generated
        so far are prefilled in one go, and decoding continues where it stopped — the
        output is the same as if it had never been preempted.
        """
        self.num_computed_tokens = 0
        self.block_table = []
        self.status = SequenceStatus.WAITING
        self.num_preemptions += 1
