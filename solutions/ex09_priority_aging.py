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

Task 4 puts the policy to work for a shared service: `TenantQuotaScheduler` (at the end
of this file) caps each tenant's batch slots while others wait — and only then — and
picks its preemption victims among the tenants over their quota. It is graded inside the
engine: on the simulator and on the real engine with a tiny random Llama.

Check: the cell at the end of lesson 09, or `python -m minillm.grading 09`.
"""

from __future__ import annotations

import math
from collections import Counter

from minillm.engine.sequence import Sequence
from minillm.scheduler import SchedulerOutput
from minillm.scheduler.continuous import ContinuousScheduler


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


# ---------------------------------------------------------------------- task 4: tenant quotas

class TenantQuotaScheduler(ContinuousScheduler):
    """Per-tenant slot quotas that never leave a slot idle, on top of the aging policy.

    A service shared by several customers ("tenants") must stop one of them from taking
    every batch slot. A *hard* quota (lesson 09, section 5) caps tenant A at `quotas["A"]`
    running sequences even when nobody else wants a slot — the rest stay empty. This one
    is **work-conserving** (工作保持):

    * a tenant runs at most its quota **while another tenant under its own quota has a
      request waiting**; otherwise it may use every free slot;
    * its running sequences beyond the quota are the first to go when another tenant
      needs room: `schedule` (given) preempts them (by recompute) while a waiting
      request's tenant is under its quota and every slot is taken.

    A tenant is the part of the request id before its first "-" ("A-17" → "A"); a
    tenant missing from `quotas` may use every slot (`max_num_seqs`). The order inside
    the queue stays the policy's (`super().ordered_waiting(now)`: priority with aging
    when `policy="priority"`). It plugs into the engine like any scheduler:

        class MyQuotas(TenantQuotaScheduler):
            quotas = {"A": 4}
        LLM(model, scheduling=MyQuotas, policy="priority", aging_rate=1.0, max_num_seqs=8)
    """

    name = "ex09-tenant-quota"
    quotas: dict[str, int] = {}

    @staticmethod
    def tenant(seq: Sequence) -> str:
        """The tenant of a request: its id up to the first "-" (given)."""
        return seq.request_id.split("-", 1)[0]

    def quota(self, tenant: str) -> int:
        """Slots `tenant` is guaranteed (given): its quota, else every slot."""
        return self.quotas.get(tenant, self.config.max_num_seqs)

    def running_per_tenant(self) -> Counter:
        """Running sequences per tenant (given)."""
        return Counter(self.tenant(s) for s in self.running)

    def schedule(self, now: float) -> SchedulerOutput:
        """Reclaim slots for tenants under their quota, then the usual phases (given)."""
        reclaimed = []
        while self.running and len(self.running) >= self.config.max_num_seqs \
                and self._someone_under_quota_waits():
            victim = self.victim(now)
            if self.running_per_tenant()[self.tenant(victim)] <= self.quota(self.tenant(victim)):
                break                                  # nobody is over quota: nothing to take
            self.preempt(victim)
            reclaimed.append(victim)
        out = super().schedule(now)
        out.preempted[:0] = reclaimed                  # recorded in the Trace like any preemption
        return out

    def _someone_under_quota_waits(self) -> bool:
        running = self.running_per_tenant()
        return any(running[self.tenant(s)] < self.quota(self.tenant(s)) for s in self.waiting)

    # ------------------------------------------------------------------ your part
    def ordered_waiting(self, now: float) -> list[Sequence]:
        """The queue the scheduler admits from: the policy's order, without the requests
        that would push their tenant past its quota while another tenant needs the slot.

        Walk `super().ordered_waiting(now)`, counting each tenant's sequences: those
        running (`running_per_tenant()`) plus those you have kept so far. Keep a request
        if its tenant is still below its `quota(...)`, or if no *other* tenant that is
        below its own quota has a request waiting (work-conserving: a slot nobody else
        may take is not left idle); drop it otherwise. The scheduler admits from your
        list in order and stops at the first request that does not fit.
        """
        queue = super().ordered_waiting(now)
        waiting_tenants = {self.tenant(s) for s in queue}
        counts = self.running_per_tenant()
        kept = []
        for seq in queue:
            tenant = self.tenant(seq)
            others_wait = any(counts[other] < self.quota(other)
                              for other in waiting_tenants - {tenant})
            if counts[tenant] < self.quota(tenant) or not others_wait:
                kept.append(seq)
                counts[tenant] += 1
        return kept

    def victim(self, now: float) -> Sequence:
        """The running sequence to preempt (when KV memory runs out, or to reclaim a slot):
        the last in policy order (`order_key`) among the sequences of tenants running more
        than their quota; when no tenant is over its quota, the last in policy order of all
        (the answer key's rule, `ContinuousScheduler.victim`).
        """
        counts = self.running_per_tenant()
        over = [s for s in self.running if counts[self.tenant(s)] > self.quota(self.tenant(s))]
        return max(over or self.running, key=lambda s: self.order_key(s, now))
