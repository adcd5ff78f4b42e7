"""Iteration-level scheduling (迭代级调度), a.k.a. continuous batching (连续批处理).

Orca's idea: schedule *every step* instead of every batch. A sequence that emits EOS
leaves at the end of its step and a waiting request takes its slot at the next one, so
no slot idles while work is queued. KV blocks are taken on demand (paged), one block at
a time as sequences grow.

One `schedule()` call runs three phases, Sarathi-Serve's stall-free order:

1. `schedule_decodes` — every running sequence that is generating gets its token.
   Each decode needs one token of budget and, every `block_size` tokens, one new
   block. If no block is free, `take_blocks` **preempts by recompute** the running
   sequence that comes last in policy order (latest arrival, least urgent) — it
   loses its blocks and goes back to the queue (possibly the sequence itself);
2. `schedule_prefill_chunks` — sequences in the middle of a chunked prefill get their
   next chunk from the budget that is left;
3. `admit_waiting` — **waiting requests join** while a slot (`max_num_seqs`), token budget
   (`max_num_batched_tokens`) and blocks are left, in policy order. Without chunked
   prefill a prompt joins only if it fits the remaining budget whole; the head of
   the queue is never skipped (that would break FCFS). With chunked prefill
   (分块预填充, Sarathi-Serve) a prompt takes whatever budget is left and finishes
   in later steps. No one joins in a step that had to preempt: memory is short.
   With prefix caching on, a newcomer first borrows the cached blocks of its prompt's
   prefix (`prefix_cache.py`) and only the rest of the prompt is scheduled; a
   swapped-out sequence gets its blocks copied back (`preemption_mode="swap"`).

Prefill chunks and decodes run in the same forward (selective batching), so a
long prompt never stops the decoders — it only shares the step with them.
"""

from __future__ import annotations

from minillm.engine.sequence import Sequence, SequenceStatus
from minillm.scheduler.base import Scheduler, SchedulerOutput, scheduled_row


class ContinuousScheduler(Scheduler):
    name = "continuous"

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput(num_slots=self.config.max_num_seqs)
        self.schedule_decodes(out, now)
        self.schedule_prefill_chunks(out, now)
        if not out.preempted:                  # memory is short: nobody new this step
            self.admit_waiting(out, now)
        out.swap_out = self.take_swap_out()
        return out

    def budget_left(self, out: SchedulerOutput) -> int:
        """Tokens this step may still run (`max_num_batched_tokens` minus the plan's)."""
        return self.config.max_num_batched_tokens - out.num_batched_tokens

    def schedule_decodes(self, out: SchedulerOutput, now: float) -> None:
        """One token (plus any speculative guesses) for every running decode, in policy order."""
        decodes = [s for s in self.running if not s.in_prefill]
        self._schedule_running(sorted(decodes, key=lambda s: self.order_key(s, now)), out, now)

    def schedule_prefill_chunks(self, out: SchedulerOutput, now: float) -> None:
        """The next chunk for every running sequence mid-prompt: min(uncomputed, budget left)."""
        chunks = [s for s in self.running if s.in_prefill]
        self._schedule_running(sorted(chunks, key=lambda s: self.order_key(s, now)), out, now)

    def _schedule_running(self, queue: list[Sequence], out: SchedulerOutput, now: float) -> None:
        for seq in queue:
            if seq.status is not SequenceStatus.RUNNING:   # preempted earlier in this pass
                continue
            num_new = min(seq.num_tokens_to_run, self.budget_left(out))
            if num_new == 0:
                return                                     # token budget used up
            if self.take_blocks(seq, num_new, out, now):
                out.scheduled.append(scheduled_row(seq, num_new))

    def take_blocks(self, seq: Sequence, num_new: int, out: SchedulerOutput, now: float) -> bool:
        """Allocate the blocks `seq` needs for `num_new` tokens, preempting while none are free.

        The victim is the running sequence that comes *last* in policy order — the latest
        arrival under FCFS, the least urgent under "priority" (vLLM's rule) — even one
        already planned this step (its row is taken back), and possibly `seq` itself.
        Returns False if `seq` was the victim.
        """
        while not self.kv.can_allocate(seq, num_new):
            victim = self.victim(now)
            out.scheduled = [row for row in out.scheduled if row.seq is not victim]
            self.preempt(victim)
            out.preempted.append(victim)
            if victim is seq:
                return False
        self.kv.allocate(seq, num_new)
        return True

    def victim(self, now: float) -> Sequence:
        """The running sequence to preempt when KV memory runs out: the last in policy order."""
        return max(self.running, key=lambda s: self.order_key(s, now))

    def admit_waiting(self, out: SchedulerOutput, now: float) -> None:
        """Waiting requests join, in policy order, while a slot, budget and blocks are left.

        Without chunked prefill a prompt joins only if it fits the budget whole; with it,
        a prompt takes whatever budget is left. The head of the queue is never skipped
        (FCFS): the first request that cannot join ends the admissions.
        """
        budget = self.budget_left(out)
        if len(self.running) >= self.config.max_num_seqs or budget == 0 or not self.waiting:
            return                                         # no room: skip sorting the queue
        for seq in self.ordered_waiting(now):
            if len(self.running) >= self.config.max_num_seqs or budget == 0:
                break
            cached = 0 if seq.is_swapped else self.kv.acquire_cached_prefix(seq)
            num_new = seq.num_uncomputed_tokens
            # a preempted sequence's recompute may exceed the budget: always chunk it
            if self.config.enable_chunked_prefill or seq.num_preemptions > 0:
                num_new = min(num_new, budget)
            if num_new > budget or not self.kv.can_allocate(seq, num_new):
                if cached:                                 # the head waits for a later step
                    self.kv.free(seq)                      # give the shared prefix back
                    seq.num_computed_tokens = 0
                break
            if seq.first_scheduled_time is None:
                seq.num_cached_tokens = cached
            self.start_running(seq, now)
            if seq.is_swapped:
                out.swap_in.extend(self.kv.swap_in(seq))
            self.kv.allocate(seq, num_new)
            out.scheduled.append(scheduled_row(seq, num_new))
            budget -= num_new
