"""Lesson 03 — write the scheduler behind continuous batching (连续批处理).

Your `IterationScheduler` plugs straight into the real engine:

    from minillm import LLM
    from exercises.ex03_iteration_scheduler import IterationScheduler
    llm = LLM("smollm2-135m", scheduling=IterationScheduler, max_num_seqs=8)

Every engine step calls `schedule(now)` once and runs whatever it returns in ONE
forward pass. After the step the engine appends the sampled tokens, and for every
sequence that stopped (EOS, `max_tokens`) it calls `self.finish(seq)`, which removes it
from `self.running` and frees its KV blocks. So a finished request is already gone when
your next `schedule` runs — your job is to fill its slot from the queue right away.

What the base class `minillm.scheduler.Scheduler` gives you:

    self.config.max_num_seqs            batch slots (sequences in one step at most)
    self.config.max_num_batched_tokens  token budget of one step (prompt + decode tokens)
    self.config.max_model_len           longest sequence allowed
    self.running                        sequences in the batch (list)
    self.waiting                        queued sequences (list, unordered)
    self.ordered_waiting(now)           the queue in service order (FCFS: by arrival)
    self.start_running(seq, now)       move seq from waiting to running (+ timestamps)
    self.kv.block_size, self.kv.num_free_blocks
    self.kv.allocate(seq, n)            give seq the blocks its next n tokens need
    scheduled_row(seq, n)               one row of the plan: "run n tokens of seq"

and on a `Sequence`: `num_uncomputed_tokens` (the whole prompt before its first step,
1 for a decode), `max_total_tokens` (prompt + max_tokens), `block_table` (its blocks).

What you write is the essential version of the answer key's `minillm/scheduler/continuous.py::
ContinuousScheduler` (which adds chunking, preemption and prefix caching); `worst_case_blocks`
has the same contract as `minillm/scheduler/base.py::Scheduler.worst_case_blocks`.

Run the check cell at the end of lesson 03 (or `python -m minillm.grading 03`).
"""

from __future__ import annotations

from minillm.engine.sequence import Sequence
from minillm.kv_cache import cdiv  # noqa: F401  (ceiling division, you will want it)
from minillm.scheduler import Scheduler, SchedulerOutput, scheduled_row  # noqa: F401


class IterationScheduler(Scheduler):
    """Iteration-level scheduling (迭代级调度), the essential version.

    No chunked prefill (a prompt runs whole, in one step) and no preemption. Without
    preemption, memory must never run out in the middle of a decode — so admit a request
    only if every running sequence, and the newcomer, could still grow to its worst case.
    That rule also means the engine can never deadlock: an empty engine can always take
    the head of the queue (the engine rejected, up front, any request that cannot fit).
    """

    name = "iteration (ex03)"

    def worst_case_blocks(self, seq: Sequence) -> int:
        """KV blocks `seq` holds once it has generated all of its `max_tokens`.

        Its length then is prompt + max_tokens (`seq.max_total_tokens`), but never more
        than `self.config.max_model_len`; blocks hold `self.kv.block_size` tokens each.

        Example: block_size 16, prompt 20, max_tokens 30 → 50 tokens → 4 blocks.
        """
        raise NotImplementedError("Your turn: ceil(min(prompt + max_tokens, max_model_len) / block_size)")

    def can_admit(self, seq: Sequence, num_running: int, budget_left: int) -> bool:
        """May waiting `seq` join the batch now? All three must hold:

        1. a free slot: `num_running` < max_num_seqs;
        2. its whole prompt (`seq.num_uncomputed_tokens`) fits in `budget_left`;
        3. memory: the blocks every running sequence may still need
           (worst_case_blocks(r) - len(r.block_table)) plus the newcomer's worst case
           fit in the free blocks.
        """
        raise NotImplementedError("Your turn: slots, token budget, worst-case KV blocks")

    def schedule(self, now: float) -> SchedulerOutput:
        """One step's plan: decode every running sequence, then admit from the queue.

        1. `out = SchedulerOutput(num_slots=self.config.max_num_seqs)`;
        2. each running sequence runs its `num_uncomputed_tokens` (1) token, as long as
           the token budget lasts: `self.kv.allocate(seq, n)`, then
           `out.scheduled.append(scheduled_row(seq, n))`;
        3. walk `self.ordered_waiting(now)`; stop at the first request that
           `can_admit` refuses (never skip the head: that would break FCFS). Otherwise
           `self.start_running(seq, now)`, allocate its prompt's blocks, add its row.
        """
        raise NotImplementedError("Your turn: keep the batch decoding, refill free slots")
