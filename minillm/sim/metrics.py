"""Serving metrics, all computed from a Trace (real model or simulator alike).

Per request (only requests that finished normally, "stop" or "length"; aborted ones
are left out of latencies):

* **TTFT**, time to first token = first token time − arrival time. Queueing + prefill:
  what a chat user feels before anything appears.
* **TPOT**, time per output token = (finish − first token) / (output tokens − 1): the
  average pace of the stream after the first token (undefined for 1-token answers).
* **ITL**, inter-token latency: *every* gap between two consecutive tokens of a
  request, pooled over all requests. TPOT averages the gaps of one request; ITL keeps
  them all, so one long stall (a prefill that joined the batch, a preemption) shows up
  in ITL's P99 even when every TPOT looks fine.
* **E2E** latency = finish − arrival.

Percentiles P50 / P90 / P99 use `numpy.percentile` with method="linear" (NumPy's
default, Hyndman–Fan type 7: interpolate between the two nearest order statistics).

Per run:

* throughput: generated tokens / s, and total tokens / s (prompt + generated, counting
  each request's prompt once — recomputation after a preemption is not useful work),
  over the trace's duration (first arrival → end of the last step);
* **slot utilisation** = busy slot-steps / all slot-steps: each step offers
  `num_slots` (= max_num_seqs) batch slots, of which `len(step.scheduled)` do work;
* **KV utilisation** = tokens held / token slots of the blocks in use, and **KV waste**
  = 1 − utilisation: memory reserved but holding no token. Both are averaged over
  steps *weighted by step duration* (a time average: "what fraction of the memory-time
  was wasted"), skipping steps that end with no block in use;
* preemptions, and **goodput**: requests per second that met the SLO (TTFT and/or TPOT
  limits) — throughput that counts only the requests users were happy with.

Public API::

    request_metrics(trace) -> dict[str, np.ndarray]     ttft, tpot, e2e, itl
    percentiles(values, qs=(50, 90, 99)) -> dict[int, float]
    slot_utilization(trace), kv_utilization(trace, block_size=None)
    goodput(trace, ttft_slo=None, tpot_slo=None) -> dict
    summarize(trace, ttft_slo=None, tpot_slo=None) -> dict
    format_table(summaries: dict[str, dict], keys=None) -> str
"""

from __future__ import annotations

import math

import numpy as np

from minillm.engine.checks import check_number
from minillm.engine.trace import RequestRecord, Trace

PERCENTILES = (50, 90, 99)
PERCENTILE_METHOD = "linear"
COMPLETED = ("stop", "length")


def completed_requests(trace: Trace) -> list[RequestRecord]:
    """Requests that finished normally (not aborted, not still running)."""
    return [r for r in trace.requests.values() if r.finish_reason in COMPLETED]


def time_to_first_token(arrival: float, first_token: float | None) -> float | None:
    """TTFT = first token − arrival: queueing + prefill (None before the first token)."""
    return None if first_token is None else first_token - arrival


def time_per_output_token(first_token: float | None, finish: float | None,
                          num_output_tokens: int) -> float | None:
    """TPOT = (finish − first token) / (tokens − 1): the mean gap after the first token."""
    if first_token is None or finish is None or num_output_tokens < 2:
        return None
    return (finish - first_token) / (num_output_tokens - 1)


def end_to_end_latency(arrival: float, finish: float | None) -> float | None:
    """E2E = finish − arrival."""
    return None if finish is None else finish - arrival


def ttft(r: RequestRecord) -> float:
    return time_to_first_token(r.arrival_time, r.first_token_time)


def tpot(r: RequestRecord) -> float | None:
    return time_per_output_token(r.first_token_time, r.finish_time, r.output_len)


def e2e(r: RequestRecord) -> float:
    return end_to_end_latency(r.arrival_time, r.finish_time)


def request_metrics(trace: Trace) -> dict[str, np.ndarray]:
    """Arrays of TTFT [R], TPOT [R'] (requests with >= 2 tokens), E2E [R], ITL [all gaps]."""
    done = completed_requests(trace)
    tpots = [t for t in (tpot(r) for r in done) if t is not None]
    gaps = [np.diff(r.token_times) for r in done if len(r.token_times) > 1]
    return {"ttft": np.array([ttft(r) for r in done]),
            "tpot": np.array(tpots),
            "e2e": np.array([e2e(r) for r in done]),
            "itl": np.concatenate(gaps) if gaps else np.array([])}


def percentiles(values, qs=PERCENTILES) -> dict[int, float]:
    """{q: the q-th percentile} (NaN for no values), numpy's "linear" method."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return {q: float("nan") for q in qs}
    return {q: float(v) for q, v in zip(qs, np.percentile(values, qs, method=PERCENTILE_METHOD))}


def slot_counts(trace: Trace) -> tuple[int, int]:
    """(busy slot-steps, all slot-steps) over the trace."""
    busy = sum(len(s.scheduled) for s in trace.steps)
    total = sum(s.num_slots for s in trace.steps)
    return busy, total


def slot_utilization(trace: Trace) -> float:
    busy, total = slot_counts(trace)
    return busy / total if total else float("nan")


def _time_weighted_mean(values: list[float], weights: list[float]) -> float:
    if not values:
        return float("nan")
    if sum(weights) <= 0:                      # zero-length steps: plain average
        return float(np.mean(values))
    return float(np.average(values, weights=weights))


def kv_utilization(trace: Trace, block_size: int | None = None) -> float:
    """Duration-weighted mean of tokens held / token slots of used blocks."""
    block_size = block_size or trace.config.get("block_size")
    if not block_size:
        raise ValueError("the trace's config has no block_size: pass block_size=")
    steps = [s for s in trace.steps if s.kv_blocks_used > 0]
    fractions = [s.kv_tokens_held / (s.kv_blocks_used * block_size) for s in steps]
    return _time_weighted_mean(fractions, [s.duration for s in steps])


def generated_tokens(trace: Trace) -> int:
    return sum(r.output_len for r in trace.requests.values())


def prompt_tokens(trace: Trace) -> int:
    """Prompt tokens of the requests that produced at least one token (each once)."""
    return sum(r.prompt_len for r in trace.requests.values() if r.output_len > 0)


def num_preemptions(trace: Trace) -> int:
    return sum(len(s.preempted) for s in trace.steps)


def meets_slo(r: RequestRecord, ttft_slo: float | None, tpot_slo: float | None) -> bool:
    """TTFT <= ttft_slo and TPOT <= tpot_slo (a limit of None is not checked;
    a 1-token answer has no TPOT and passes that limit)."""
    if ttft_slo is not None and ttft(r) > ttft_slo:
        return False
    t = tpot(r)
    return tpot_slo is None or t is None or t <= tpot_slo


def goodput(trace: Trace, ttft_slo: float | None = None, tpot_slo: float | None = None) -> dict:
    """Requests meeting the SLO: their count, rate (per second) and fraction.

    The fraction is over every request that was not aborted (one still unfinished
    when the trace ends counts as a miss).
    """
    good = sum(meets_slo(r, ttft_slo, tpot_slo) for r in completed_requests(trace))
    considered = sum(r.finish_reason != "abort" for r in trace.requests.values())
    duration = trace.duration
    return {"good_requests": good,
            "goodput_rps": good / duration if duration > 0 else float("nan"),
            "goodput_fraction": good / considered if considered else float("nan")}


def summarize(trace: Trace, ttft_slo: float | None = None, tpot_slo: float | None = None) -> dict:
    """Every metric of the module in one flat dict (latencies in seconds).

    `ttft_slo` / `tpot_slo` (seconds, or None for no limit) define goodput: the share of
    requests that met both."""
    for name, slo in (("ttft_slo", ttft_slo), ("tpot_slo", tpot_slo)):
        if slo is not None:
            check_number(name, slo, 0.0, above=True, hint="seconds, or None for no limit")
    duration = trace.duration
    rate = (lambda x: x / duration) if duration > 0 else (lambda x: float("nan"))
    gen, prompt = generated_tokens(trace), prompt_tokens(trace)
    busy, total = slot_counts(trace)
    summary = {
        "num_requests": len(trace.requests),
        "num_completed": len(completed_requests(trace)),
        "num_steps": len(trace.steps),
        "duration_s": duration,
        "generated_tokens": gen,
        "generated_tokens_per_s": rate(gen),
        "total_tokens_per_s": rate(gen + prompt),
        "busy_slot_steps": busy,
        "slot_steps": total,
        "slot_utilization": busy / total if total else float("nan"),
        "kv_utilization": float("nan"),
        "kv_waste": float("nan"),
        "preemptions": num_preemptions(trace),
    }
    if trace.config.get("block_size"):
        summary["kv_utilization"] = kv_utilization(trace)
        summary["kv_waste"] = 1.0 - summary["kv_utilization"]
    for name, values in request_metrics(trace).items():
        for q, v in percentiles(values).items():
            summary[f"{name}_p{q}"] = v
    if ttft_slo is not None or tpot_slo is not None:
        summary.update(goodput(trace, ttft_slo, tpot_slo))
    return summary


def format_value(key: str, value) -> str:
    """Latencies in ms, fractions in %, counts as integers."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if key.split("_")[0] in ("ttft", "tpot", "itl", "e2e"):
        return f"{value * 1000:.1f} ms"
    if key.endswith(("utilization", "waste", "fraction")):
        return f"{value * 100:.1f}%"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f"{value:.4g}"


def format_table(summaries: dict[str, dict], keys: list[str] | None = None) -> str:
    """Side-by-side text table: one row per metric, one column per summary.

    >>> print(format_table({"static": summarize(t1), "continuous": summarize(t2)}))
    """
    names = list(summaries)
    if keys is None:
        keys = list(dict.fromkeys(k for s in summaries.values() for k in s))
    rows = [["metric", *names]]
    rows += [[k, *(format_value(k, summaries[n].get(k)) for n in names)] for k in keys]
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                       for c, (cell, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
