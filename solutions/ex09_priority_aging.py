"""Lesson 09 — solutions: priority with aging (the answer key's own policy functions).

A *priority* policy serves the request with the smallest `priority` value first
(vLLM's rule: lower value = more urgent). On its own that is unfair: while urgent
requests keep arriving, a low-priority request waits forever — **starvation** (饥饿).
**Aging** (老化) fixes it: every second a request waits improves its *effective*
priority by `aging_rate`,

    effective(seq, now) = seq.priority − aging_rate × (now − seq.arrival_time)

so a request that has waited long enough outranks any newcomer. How long is "long
enough"? A newcomer arriving at time s (priority p_new) ranks behind a request that
arrived at time 0 with priority p_old as soon as

    p_old − a·t  <  p_new − a·(t − s)     ⇔     s > (p_old − p_new) / a

— the comparison does not depend on `t` at all, because both requests age at the same
rate. Only requests that arrived within the first (p_old − p_new) / a seconds can ever
be served ahead of the old one: that finite set of work is the starvation bound. With
a = 0 the set is everyone, forever.

In minillm a policy is one key function, `key(seq, now, aging_rate) -> tuple` (smaller
runs first): you write the answer key's own `minillm/scheduler/policies.py::
effective_priority` and `priority_key`. The scheduler sorts the waiting queue by it and,
when KV memory runs out, preempts the running sequence with the *largest* key. Your
function plugs straight into the engine:

    from minillm import LLM
    llm = LLM(model, policy=priority_key, aging_rate=2.0, max_num_seqs=8)
    llm.generate(prompts, params, priority=[0, 5, 0, ...])

What a `Sequence` gives you: `priority` (int, lower = more urgent), `arrival_time`
(seconds, engine clock), `admission_order` (0, 1, 2, … in the order requests reached
the scheduler).

Check: the cell at the end of lesson 09, or `python -m minillm.grading 09`.
"""

from __future__ import annotations

import math

from minillm.engine.sequence import Sequence


def effective_priority(seq: Sequence, now: float, aging_rate: float) -> float:
    """The priority `seq` has at time `now`: its own, improved by the time it waited.

    priority − aging_rate × waited, where waited = now − arrival_time (never < 0).
    Example: priority 10, aging_rate 2, arrived at t = 1, now = 4 → 10 − 2·3 = 4.
    """
    return seq.priority - aging_rate * max(0.0, now - seq.arrival_time)


def priority_key(seq: Sequence, now: float, aging_rate: float) -> tuple:
    """Sort key, smaller runs first: effective priority, then arrival, then admission order.

    Ties on effective priority go to the earlier arrival (FCFS); `admission_order`
    breaks exact ties so the order never depends on how Python sorts equal keys.
    """
    return (effective_priority(seq, now, aging_rate), seq.arrival_time, seq.admission_order)


def overtake_horizon(priority_gap: float, aging_rate: float) -> float:
    """Seconds after a request's arrival during which a newcomer may still jump ahead.

    A newcomer whose priority is better by `priority_gap` points outranks the waiting
    request only if it arrives within priority_gap / aging_rate seconds of it; after
    that, the waiting request always comes first. No aging: infinity (it may starve);
    a gap of 0 or less: 0 (nobody overtakes).
    """
    if priority_gap <= 0:
        return 0.0
    if aging_rate <= 0:
        return math.inf
    return priority_gap / aging_rate
