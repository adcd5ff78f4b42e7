"""Ordering policies: who goes first when there is not room for everyone.

A policy is a key function `key(seq, now, aging_rate) -> tuple`; the smaller key runs
first. The scheduler sorts the waiting queue by it before admitting, and when KV memory
runs out it preempts the running sequence with the *largest* key.

* "fcfs" — first come, first served: earliest arrival first;
* "priority" — lowest `priority` value first (vLLM's rule: lower = more urgent). With
  `aging_rate` > 0 the effective priority improves by `aging_rate` per second waited,
  so a low-priority request cannot starve (饥饿) while urgent ones keep arriving;
* "shortest" — shortest job first: least remaining work (prompt tokens still to run
  + tokens it may still generate, by its `max_tokens`). Best for mean latency, but a
  long request can starve; `aging_rate` > 0 subtracts that many tokens per second waited.

Ties fall back to arrival time, then to `admission_order` (the order requests reached
the scheduler), so the order never depends on how Python sorts equal keys.

A new policy is one function here plus one line in `POLICIES`. `LLM(policy=...)` and the
simulator also take such a function directly (lesson 09's exercise plugs in that way).
"""

from __future__ import annotations

from minillm.engine.sequence import Sequence


def waited(seq: Sequence, now: float) -> float:
    """Seconds `seq` has been in the engine (never negative)."""
    return max(0.0, now - seq.arrival_time)


def fcfs_key(seq: Sequence, now: float, aging_rate: float) -> tuple:
    return (seq.arrival_time, seq.admission_order)


def effective_priority(seq: Sequence, now: float, aging_rate: float) -> float:
    """`priority` improved by `aging_rate` per second waited (lower = more urgent)."""
    return seq.priority - aging_rate * waited(seq, now)


def priority_key(seq: Sequence, now: float, aging_rate: float) -> tuple:
    return (effective_priority(seq, now, aging_rate), seq.arrival_time, seq.admission_order)


def shortest_key(seq: Sequence, now: float, aging_rate: float) -> tuple:
    remaining = seq.num_uncomputed_tokens + seq.params.max_tokens - seq.num_output_tokens
    return (remaining - aging_rate * waited(seq, now), seq.arrival_time, seq.admission_order)


POLICIES = {"fcfs": fcfs_key, "priority": priority_key, "shortest": shortest_key}


def resolve_policy(policy):
    """A name in `POLICIES`, or a key function of your own → the key function."""
    if callable(policy):
        return policy
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ValueError(f"policy must be one of {tuple(POLICIES)} or a key function "
                         f"(seq, now, aging_rate) -> tuple; got {policy!r}")
    return POLICIES[policy]
