"""Iteration-level scheduling (迭代级调度), a.k.a. continuous batching (连续批处理).

Orca's idea: schedule *every step* instead of every batch. A sequence that emits EOS
leaves at the end of its step and a waiting request takes its slot at the next one, so
no slot idles while work is queued. KV blocks are taken on demand (paged), one block at
a time as sequences grow.

One `schedule()` call, in order:

1. **Running sequences, decodes first.** Each decode needs one token of budget and,
   every `block_size` tokens, one new block. If no block is free, a victim is
   **preempted by recompute** — the lowest-priority, latest-arriving running
   sequence loses its blocks and goes back to the queue (possibly the sequence
   itself). Then sequences in the middle of a chunked prefill get their next chunk.
2. **Waiting requests join** while a slot (`max_num_seqs`), token budget
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

from minillm.scheduler.base import Scheduler, SchedulerOutput, ScheduledSequence, scheduled_row
from minillm.sequence import Sequence, SequenceStatus


class ContinuousScheduler(Scheduler):
    name = "continuous"

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput(num_slots=self.config.max_num_seqs)
        budget = self._schedule_running(out, now)
        if not out.preempted:
            self._admit_waiting(out, now, budget)
        out.swap_out = self.take_swap_out()
        return out

    # ---------------------------------------------------------------- step 1
    def _schedule_running(self, out: SchedulerOutput, now: float) -> int:
        """Plan the running sequences; return the token budget left for newcomers."""
        planned: dict[int, ScheduledSequence] = {}       # id(seq) -> its row
        # decodes first (in_prefill False sorts first), each group in policy order
        queue = sorted(self.running, key=lambda s: (s.in_prefill, self.order_key(s, now)))
        for seq in queue:
            if seq.status is not SequenceStatus.RUNNING:   # preempted earlier this step
                continue
            budget = self.config.max_num_batched_tokens - _tokens(planned)
            num_new = min(seq.num_tokens_to_run, budget)
            if num_new == 0:
                break                                      # token budget used up
            if not self._make_room(seq, num_new, planned, out, now):
                continue                                   # seq itself was preempted
            self.kv.allocate(seq, num_new)
            planned[id(seq)] = scheduled_row(seq, num_new)
        out.scheduled.extend(planned.values())
        return self.config.max_num_batched_tokens - _tokens(planned)

    def _make_room(self, seq: Sequence, num_new: int,
                   planned: dict[int, ScheduledSequence],
                   out: SchedulerOutput, now: float) -> bool:
        """Preempt until `seq` can get its blocks. False if `seq` itself was the victim."""
        while not self.kv.can_allocate(seq, num_new):
            victim = max(self.running, key=lambda s: self.order_key(s, now))
            planned.pop(id(victim), None)                  # un-plan it if already planned
            self.preempt(victim)
            out.preempted.append(victim)
            if victim is seq:
                return False
        return True

    # ---------------------------------------------------------------- step 2
    def _admit_waiting(self, out: SchedulerOutput, now: float, budget: int) -> None:
        if len(self.running) >= self.config.max_num_seqs or budget == 0 or not self.waiting:
            return                                         # no room: skip sorting the queue
        for seq in self.ordered_waiting(now):
            if len(self.running) >= self.config.max_num_seqs or budget == 0:
                break
            cached = 0 if seq.is_swapped else self.kv.acquire_cached_prefix(seq)
            num_new = seq.num_uncomputed_tokens
            # a preempted sequence's recompute may exceed the budget: always chunk it
            may_chunk = self.config.enable_chunked_prefill or seq.num_preemptions > 0
            if may_chunk:
                num_new = min(num_new, budget)
            fits = num_new <= budget and self.kv.can_allocate(seq, num_new)
            if not fits:                                   # head waits for a later step
                if cached:
                    self.kv.free(seq)                      # give the shared prefix back
                    seq.num_computed_tokens = 0
                break
            if seq.first_scheduled_time is None:
                seq.num_cached_tokens = cached
            self._start_running(seq, now)
            if seq.is_swapped:
                out.swap_in.extend(self.kv.swap_in(seq))
            self.kv.allocate(seq, num_new)
            out.scheduled.append(scheduled_row(seq, num_new))
            budget -= num_new

def _tokens(planned: dict[int, ScheduledSequence]) -> int:
    return sum(row.num_new_tokens for row in planned.values())
