"""Schedulers: which sequences run this step, and how many tokens each.

* `base.py`       — `Scheduler` (queues, limits, admission checks, preemption) and the
                    plan it hands out (`SchedulerOutput`, `ScheduledSequence`)
* `policies.py`   — the ordering policies: "fcfs", "priority" (+ aging), "shortest"
* `static.py`     — `StaticScheduler`: request-level batches on contiguous KV (静态批处理)
* `continuous.py` — `ContinuousScheduler`: iteration-level, paged KV, optional chunked
                    prefill (连续批处理 / 分块预填充)
* `variants.py`   — the other two corners of batching × memory: continuous batching on a
                    contiguous reservation, and static batches on paged blocks

Schedulers are pure Python and deterministic, so the same code drives the real model,
the simulator and the property tests. A new scheduler is one new file (a `Scheduler`
subclass) plus one line in `SCHEDULERS`; `LLM(scheduling=...)` and the simulator also
take a `Scheduler` subclass directly (the exercises plug in that way).
"""

import inspect

from minillm.scheduler.base import (PREEMPTION_MODES, ScheduledSequence, Scheduler,
                                    SchedulerOutput, scheduled_row)
from minillm.scheduler.continuous import ContinuousScheduler
from minillm.scheduler.policies import POLICIES
from minillm.scheduler.static import StaticScheduler
from minillm.scheduler.variants import PagedStaticScheduler, ReservingContinuousScheduler

# One registry. Lesson 05's 2×2 grid (batching in time × KV memory in space) names
# each scheduler by its corner; "continuous" and "static" are the everyday names.
SCHEDULERS = {
    "continuous": ContinuousScheduler,             # = continuous+paged
    "static": StaticScheduler,                     # = static+contiguous
    "continuous+paged": ContinuousScheduler,
    "static+contiguous": StaticScheduler,
    "continuous+contiguous": ReservingContinuousScheduler,
    "static+paged": PagedStaticScheduler,
}
# the four corners, by their 2×2 names (what lesson 05 compares)
VARIANTS = {name: cls for name, cls in SCHEDULERS.items() if "+" in name}


def resolve_scheduler(scheduling) -> type[Scheduler]:
    """A name in `SCHEDULERS`, or your own `Scheduler` subclass → the class."""
    if isinstance(scheduling, type) and issubclass(scheduling, Scheduler):
        if inspect.isabstract(scheduling):
            raise ValueError(f"scheduling={scheduling.__name__} is abstract (it has no "
                             "schedule()): pass a subclass that implements it, or a name")
        return scheduling
    if not isinstance(scheduling, str) or scheduling not in SCHEDULERS:
        raise ValueError(f"scheduling must be one of {tuple(SCHEDULERS)} or a Scheduler "
                         f"subclass, got {scheduling!r}")
    return SCHEDULERS[scheduling]


__all__ = ["POLICIES", "PREEMPTION_MODES", "SCHEDULERS", "VARIANTS", "ContinuousScheduler",
           "PagedStaticScheduler", "ReservingContinuousScheduler", "ScheduledSequence",
           "Scheduler", "SchedulerOutput", "StaticScheduler",
           "resolve_scheduler", "scheduled_row"]
