"""Request-level scheduling: static batching (静态批处理).

The way batching worked before Orca, and what `model.generate(batch)` still does:

1. take up to `max_num_seqs` requests from the queue and form a batch;
2. reserve, for each, one contiguous run of KV blocks big enough for its worst case
   (`prompt + max_tokens`) — the batch's cache is allocated up front;
3. run the batch step after step. A row that finishes **stays in the batch, idle**:
   its slot and its reserved KV memory are wasted until the longest member ends;
4. only then free everything and form the next batch. Requests that arrived in the
   meantime wait the whole time — head-of-line blocking (队首阻塞).

Every prompt is prefilled whole in the first step (a static batch has no token
budget), and no preemption is needed: nothing grows beyond its reservation.
The waste this causes is exactly what the Trace measures and the lessons draw.
"""

from __future__ import annotations

from minillm.engine.sequence import Sequence, SequenceStatus
from minillm.scheduler.base import Scheduler, SchedulerOutput, scheduled_row


class StaticScheduler(Scheduler):
    name = "static"
    kv_layout = "contiguous"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch: list[Sequence] = []      # the current batch, finished rows included

    def schedule(self, now: float) -> SchedulerOutput:
        if all(seq.is_finished for seq in self.batch):
            self._release_batch()
            self._form_batch(now)
        out = SchedulerOutput(num_slots=self.config.max_num_seqs)
        for seq in self.batch:
            if seq.is_finished:
                out.idle.append(seq)
            else:
                out.scheduled.append(scheduled_row(seq, seq.num_uncomputed_tokens))
        return out

    def _form_batch(self, now: float) -> None:
        for seq in self.ordered_waiting(now):
            if len(self.batch) >= self.config.max_num_seqs:
                break
            if not self.kv.reserve_contiguous(seq, self.worst_case_tokens(seq)):
                break                       # FCFS: the head waits for the next batch
            self.start_running(seq, now)
            self.batch.append(seq)

    def _release_batch(self) -> None:
        for seq in self.batch:
            self.kv.free(seq)
        self.batch = []

    def kv_holders(self) -> list[Sequence]:
        return self.batch                    # finished rows keep their reservation

    def finish(self, seq: Sequence) -> None:
        """A finished row leaves `running` but keeps its slot and KV until the batch ends."""
        self.running.remove(seq)
        if all(member.is_finished for member in self.batch):
            self._release_batch()

    def abort(self, request_id: str) -> Sequence | None:
        for seq in self.batch:
            if seq.request_id == request_id and not seq.is_finished:
                self.running.remove(seq)
                seq.status = SequenceStatus.FINISHED
                seq.finish_reason = "abort"
                if all(member.is_finished for member in self.batch):
                    self._release_batch()
                return seq
        return super().abort(request_id)
