"""Lesson 03 — solutions: an iteration-level scheduler that runs inside the real engine."""

from __future__ import annotations

from minillm.engine.sequence import Sequence
from minillm.kv_cache import cdiv
from minillm.scheduler import Scheduler, SchedulerOutput, scheduled_row


class IterationScheduler(Scheduler):
    """Continuous batching, the essential version: no chunking, no preemption."""

    name = "iteration (ex03)"

    def worst_case_blocks(self, seq: Sequence) -> int:
        """Blocks `seq` holds when it has generated all `max_tokens` (or hit max_model_len)."""
        longest = min(seq.max_total_tokens, self.config.max_model_len)
        return cdiv(longest, self.kv.block_size)

    def can_admit(self, seq: Sequence, num_running: int, budget_left: int) -> bool:
        """A free slot, its whole prompt within the token budget, and worst-case memory."""
        if num_running >= self.config.max_num_seqs:
            return False
        if seq.num_uncomputed_tokens > budget_left:
            return False
        still_needed = sum(self.worst_case_blocks(r) - len(r.block_table) for r in self.running)
        return still_needed + self.worst_case_blocks(seq) <= self.kv.num_free_blocks

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput(num_slots=self.config.max_num_seqs)
        budget = self.config.max_num_batched_tokens
        # 1. everyone in the batch decodes one token (memory for it is guaranteed)
        for seq in list(self.running):
            num_new = seq.num_uncomputed_tokens              # 1 after the prefill
            if num_new > budget:
                continue                                     # waits for the next step
            self.kv.allocate(seq, num_new)
            out.scheduled.append(scheduled_row(seq, num_new))
            budget -= num_new
        # 2. the queue fills the free slots, head first
        for seq in self.ordered_waiting(now):
            if not self.can_admit(seq, len(self.running), budget):
                break                                        # FCFS: never skip the head
            num_new = seq.num_uncomputed_tokens              # the whole prompt
            self.start_running(seq, now)
            self.kv.allocate(seq, num_new)
            out.scheduled.append(scheduled_row(seq, num_new))
            budget -= num_new
        return out
