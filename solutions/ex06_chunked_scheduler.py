"""Lesson 06 — a token-budget scheduler with chunked prefill (分块预填充).

Every step may run at most `max_num_batched_tokens` tokens (the **token budget**).
Sarathi-Serve's *stall-free* rule spends it in this order:

1. **decodes first** — every running sequence that is generating gets its one token,
   so a long prompt arriving can never stall the streams already running;
2. **prefill chunks** — sequences part-way through their prompt get the next piece,
   as much as the budget left allows;
3. **newcomers** — waiting requests join (first come, first served) with a first chunk
   of whatever budget is still left, while a batch slot and KV blocks are free.

A 1,000-token prompt under a 128-token budget thus runs over 8 steps, each one also
carrying every decode: no single step is ever much longer than a decode step.

Your class plugs into the real engine:

    from minillm import LLM
    llm = LLM(model, scheduling=ChunkedPrefillScheduler, enable_chunked_prefill=True,
              max_num_batched_tokens=64)

You fill in the answer key's own three phases — `minillm/scheduler/continuous.py::
ContinuousScheduler.schedule_decodes / schedule_prefill_chunks / admit_waiting` — in their
essential form (no speculative guesses, no swap, no prefix cache). What you get from
`minillm.scheduler.Scheduler` (read its docstrings):

    self.config.max_num_batched_tokens, self.config.max_num_seqs
    self.running, self.waiting          lists of `Sequence`
    self.order_key(seq, now)            sort key: smaller runs first (FCFS by default)
    self.ordered_waiting(now)           the queue in that order
    self.kv.can_allocate(seq, n)        are the blocks for n more tokens free?
    self.start_running(seq, now)        move a sequence from waiting to running
    scheduled_row(seq, n)               a plan row: run n tokens of seq

and from `Sequence`: `num_uncomputed_tokens` (tokens whose K/V are not cached yet:
1 for a decode, more during a prefill), `in_prefill` (more than one uncomputed) and
`status` (`SequenceStatus.RUNNING` while in the batch).

Given: `budget_left(out)` — tokens the step may still run — and `take_blocks`, which
gets a running sequence the KV blocks its tokens need. When the cache is full it
**preempts by recompute** the running sequence that comes last in `order_key` order —
even one you already planned this step (its row is taken out of `out.scheduled`), and
possibly the sequence you asked for. **So a sequence later in your loop may have been
preempted earlier in the same pass: skip any that is no longer RUNNING.**

Your turn: replace each `raise NotImplementedError` with your code, then run the check
cell at the end of lesson 06 (or `python -m minillm.grading 06`).
"""

from __future__ import annotations

from minillm.engine.sequence import Sequence, SequenceStatus
from minillm.scheduler import Scheduler, SchedulerOutput, scheduled_row


class ChunkedPrefillScheduler(Scheduler):
    name = "ex06-chunked"

    def schedule(self, now: float) -> SchedulerOutput:
        """One step's plan: decodes, then prefill chunks, then newcomers (given)."""
        out = SchedulerOutput(num_slots=self.config.max_num_seqs)
        self.schedule_decodes(out, now)
        self.schedule_prefill_chunks(out, now)
        if not out.preempted:                  # memory is short: nobody new this step
            self.admit_waiting(out, now)
        return out

    def budget_left(self, out: SchedulerOutput) -> int:
        """Tokens this step may still run (given)."""
        return self.config.max_num_batched_tokens - out.num_batched_tokens

    # ------------------------------------------------------------------ your part
    def schedule_decodes(self, out: SchedulerOutput, now: float) -> None:
        """Plan one token for every running sequence that is decoding.

        Decoding = not `in_prefill`. Go in `order_key` order; stop when `budget_left(out)`
        is 0; skip a sequence that is no longer RUNNING (preempted earlier in this pass);
        call `take_blocks(seq, 1, out, now)` (skip the sequence if it returns False: it
        was the victim), then append `scheduled_row(seq, 1)` to `out.scheduled`.
        """
        decoding = sorted((s for s in self.running if not s.in_prefill),
                          key=lambda s: self.order_key(s, now))
        for seq in decoding:
            if self.budget_left(out) == 0:
                break
            if seq.status is not SequenceStatus.RUNNING or not self.take_blocks(seq, 1, out, now):
                continue
            out.scheduled.append(scheduled_row(seq, 1))

    def schedule_prefill_chunks(self, out: SchedulerOutput, now: float) -> None:
        """Give running sequences that are mid-prompt their next chunk.

        Chunk = min(uncomputed tokens, `budget_left(out)`). Same order, skip rule and
        `take_blocks` rule as the decodes.
        """
        prefilling = sorted((s for s in self.running if s.in_prefill),
                            key=lambda s: self.order_key(s, now))
        for seq in prefilling:
            chunk = min(seq.num_uncomputed_tokens, self.budget_left(out))
            if chunk == 0:
                break
            if seq.status is not SequenceStatus.RUNNING or not self.take_blocks(seq, chunk, out, now):
                continue
            out.scheduled.append(scheduled_row(seq, chunk))

    def admit_waiting(self, out: SchedulerOutput, now: float) -> None:
        """Let waiting requests join with a first chunk, in `ordered_waiting` order.

        Stop at the first one that cannot join — no `budget_left(out)`, all `max_num_seqs`
        slots taken, or its chunk's blocks not free (`kv.can_allocate`): skipping the
        head of the queue would break first-come-first-served. To join:
        `start_running(seq, now)`, `kv.allocate(seq, chunk)`, append the row.
        """
        for seq in self.ordered_waiting(now):
            chunk = min(seq.num_uncomputed_tokens, self.budget_left(out))
            if chunk == 0 or len(self.running) >= self.config.max_num_seqs:
                break
            if not self.kv.can_allocate(seq, chunk):
                break
            self.start_running(seq, now)
            self.kv.allocate(seq, chunk)
            out.scheduled.append(scheduled_row(seq, chunk))

    # ------------------------------------------------------------------ given
    def take_blocks(self, seq: Sequence, num_new: int, out: SchedulerOutput, now: float) -> bool:
        """Allocate the blocks `seq` needs for `num_new` tokens, preempting if the cache is full.

        The victim is the running sequence that comes last in `order_key` order — the
        answer key's (and vLLM's) rule: even one already planned this step (its row is
        taken back) and possibly `seq` itself. It loses its blocks and waits to be
        recomputed. Returns False if `seq` itself was the victim.
        """
        while not self.kv.can_allocate(seq, num_new):
            victim = max(self.running, key=lambda s: self.order_key(s, now))
            out.scheduled = [row for row in out.scheduled if row.seq is not victim]
            self.preempt(victim)
            out.preempted.append(victim)
            if victim is seq:
                return False
        self.kv.allocate(seq, num_new)
        return True
