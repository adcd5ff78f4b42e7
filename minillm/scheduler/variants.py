"""Time × space: the four ways to combine batching and KV memory management.

Serving wastes resources along two axes, and each technique fixes one:

* **time** — continuous batching (连续批处理): a finished sequence leaves at the end
  of its step and a waiting one takes its slot (vs static batching: the whole batch
  waits for its longest member);
* **space** — paged KV cache (分页KV缓存, PagedAttention): a sequence takes KV blocks
  one at a time as it grows (vs a contiguous reservation of `prompt + max_tokens` made
  when it is admitted).

minillm's two built-in schedulers are the diagonal: `StaticScheduler` (static +
contiguous: what `model.generate(batch)` and FasterTransformer did) and
`ContinuousScheduler` (continuous + paged: vLLM). This module adds the two
half-solutions, so each failure mode can be measured on its own:

* `ReservingContinuousScheduler` — continuous batching whose admissions reserve
  `prompt + max_tokens` contiguously. This is the "Orca (Max)" baseline of the vLLM
  paper. A slot frees up every step, but a newcomer joins only if a free *run* of
  blocks covers its worst case: slots sit empty while requests wait — "free seats,
  but nobody fits".
* `PagedStaticScheduler` — paged blocks, but request-level scheduling: a new batch
  is admitted only when every member of the last one has finished. Memory is used
  well while the batch is full, then the blocks freed by early finishers stay free
  while the queue waits for the straggler.

All four are in the `SCHEDULERS` registry (`minillm/scheduler/__init__.py`) under their
2×2 names (`VARIANTS` lists just those), so `LLM(scheduling="static+paged")` and
`simulate(..., scheduling=...)` run any of them.
"""

from __future__ import annotations

from minillm.scheduler.base import SchedulerOutput, scheduled_row
from minillm.scheduler.continuous import ContinuousScheduler


class ReservingContinuousScheduler(ContinuousScheduler):
    """Continuous batching on a contiguous KV reservation (vLLM paper: "Orca (Max)")."""

    name = "continuous+contiguous"
    kv_layout = "contiguous"

    def admit_waiting(self, out: SchedulerOutput, now: float) -> None:
        """Admit in order while the head's worst case (prompt + max_tokens) fits one free run.

        With chunked prefill the first chunk takes the budget left, as in the base class;
        the reservation already holds every later chunk.
        """
        budget = self.budget_left(out)
        for seq in self.ordered_waiting(now):
            if len(self.running) >= self.config.max_num_seqs:
                break
            num_new = seq.num_uncomputed_tokens
            if self.config.enable_chunked_prefill:
                num_new = min(num_new, budget)
            if num_new == 0 or num_new > budget or \
                    not self.kv.reserve_contiguous(seq, self.worst_case_tokens(seq)):
                break                     # FCFS: the head waits; nobody jumps the queue
            self.start_running(seq, now)
            out.scheduled.append(scheduled_row(seq, num_new))
            budget -= num_new
        # Once reserved, a sequence never needs another block: `allocate` finds its
        # table long enough, so it can never be preempted either.


class PagedStaticScheduler(ContinuousScheduler):
    """Paged KV blocks, request-level batches: nobody joins until the batch is empty."""

    name = "static+paged"

    def admit_waiting(self, out: SchedulerOutput, now: float) -> None:
        if self.running:                  # the batch in flight must finish first
            return
        super().admit_waiting(out, now)
