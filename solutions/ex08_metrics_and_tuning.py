"""Lesson 08 — solutions: metrics from timestamps, and a configuration chosen by SLA."""

from __future__ import annotations

import itertools
import math

from minillm.engine.trace import Trace
from minillm.sim.sim_runner import CostModel
from minillm.sim.simulate import simulate
from minillm.sim.workload import RequestSpec

METRICS = ("ttft", "tpot", "itl", "e2e")
PERCENTILES = (50, 90, 99)


# ---------------------------------------------------------------------- (a) metrics

def request_latencies(arrival_time: float, token_times: list[float]) -> dict:
    """The latencies of ONE finished request, from when it arrived and when each of its
    output tokens came out (seconds; ``token_times`` is sorted, at least one entry, and
    the request finished with its last token).

    Returns a dict:

    * ``"ttft"`` — time to first token: first token time − arrival;
    * ``"tpot"`` — time per output token *after the first*: (last − first) / (n − 1)
      for n tokens; ``None`` when n == 1 (there is no second token to time);
    * ``"itl"``  — inter-token latencies: the list of the n − 1 gaps between
      consecutive tokens (``[]`` when n == 1);
    * ``"e2e"``  — end-to-end latency: last token time − arrival.

    Example: arrival 1.0, tokens at [1.5, 1.6, 1.8, 2.1] → ttft 0.5, tpot 0.2,
    itl [0.1, 0.2, 0.3], e2e 1.1. TPOT is the mean of the ITL gaps of one request.
    """
    first, last, n = token_times[0], token_times[-1], len(token_times)
    gaps = [b - a for a, b in zip(token_times, token_times[1:])]      # n - 1 gaps
    return {"ttft": first - arrival_time,
            "tpot": (last - first) / (n - 1) if n > 1 else None,
            "itl": gaps,
            "e2e": last - arrival_time}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of ``values``, by linear interpolation.

    Sort the values: ``x[0] <= … <= x[n-1]``. The q-th percentile sits at the
    fractional index ``h = (n − 1) · q / 100``; with ``i = floor(h)`` it is
    ``x[i] + (h − i) · (x[i+1] − x[i])`` (just ``x[i]`` when ``i == n − 1``). This is
    NumPy's default method (Hyndman & Fan type 7), the one `minillm.sim.metrics` and most
    benchmark tools use. Return ``float("nan")`` for an empty list.

    Example: percentile([4, 1, 3, 2], 50) = 2.5; percentile([1, 2, 3, 4, 5], 90) = 4.6.
    """
    x = sorted(values)
    if not x:
        return float("nan")
    h = (len(x) - 1) * q / 100
    i = math.floor(h)
    if i >= len(x) - 1:
        return float(x[-1])
    return float(x[i] + (h - i) * (x[i + 1] - x[i]))


def latency_report(trace: Trace) -> dict[str, dict[int, float]]:
    """P50 / P90 / P99 of TTFT, TPOT, ITL and E2E over a Trace's finished requests.

    Use the requests in ``trace.requests.values()`` whose ``finish_reason`` is
    ``"stop"`` or ``"length"`` (aborted ones are not latencies anyone waited for).
    Each record has ``arrival_time`` and ``token_times``. Pool the values:

    * TTFT, TPOT, E2E: one value per request (TPOT only for requests with >= 2 tokens);
    * ITL: *every* gap of every request, all in one list — so one long stall shows up
      in the ITL tail even when each request's *average* (its TPOT) looks fine.

    Returns ``{"ttft": {50: …, 90: …, 99: …}, "tpot": {…}, "itl": {…}, "e2e": {…}}``,
    in seconds, using `request_latencies` and `percentile` above.
    """
    pooled = {name: [] for name in METRICS}
    for r in trace.requests.values():
        if r.finish_reason not in ("stop", "length"):
            continue
        lat = request_latencies(r.arrival_time, r.token_times)
        pooled["ttft"].append(lat["ttft"])
        pooled["e2e"].append(lat["e2e"])
        pooled["itl"].extend(lat["itl"])
        if lat["tpot"] is not None:
            pooled["tpot"].append(lat["tpot"])
    return {name: {q: percentile(values, q) for q in PERCENTILES}
            for name, values in pooled.items()}


# ---------------------------------------------------------------------- (b) tuning

def run_config(workload: list[RequestSpec], config: dict, cost_model: CostModel) -> Trace:
    """Simulate ``workload`` under one engine configuration (given).

    ``config`` holds ``max_num_seqs``, ``max_num_batched_tokens`` and
    ``enable_chunked_prefill``. Raises ValueError if the configuration cannot serve
    the workload at all: without chunked prefill, a prompt longer than
    ``max_num_batched_tokens`` can never be scheduled.
    """
    return simulate(workload, cost_model=cost_model, **config)


def throughput(trace: Trace) -> float:
    """Generated tokens per second over the run (given; as `minillm.sim.metrics.summarize`)."""
    from minillm.sim.metrics import summarize
    return summarize(trace)["generated_tokens_per_s"]


def find_config(workload: list[RequestSpec], ttft_p99_slo: float, tpot_p99_slo: float,
                cost_model: CostModel,
                max_num_seqs_options=(2, 4, 8, 16, 32),
                token_budget_options=(64, 128, 256, 512, 1024)) -> dict | None:
    """The configuration with the highest throughput that meets the SLA, or None.

    The SLA: P99 TTFT <= ``ttft_p99_slo`` and P99 TPOT <= ``tpot_p99_slo`` (seconds).
    Try every combination of ``max_num_seqs`` in ``max_num_seqs_options``,
    ``max_num_batched_tokens`` in ``token_budget_options`` and
    ``enable_chunked_prefill`` in (False, True):

    1. simulate it with `run_config` (skip a configuration that raises ValueError);
    2. read its P99 TTFT and P99 TPOT (your `latency_report`) — does it meet the SLA?
    3. among those that do, keep the one with the highest `throughput`.

    Returns ``{"max_num_seqs": …, "max_num_batched_tokens": …,
    "enable_chunked_prefill": …}`` — or ``None`` when no configuration meets the SLA.
    """
    best, best_throughput = None, -1.0
    for seqs, budget, chunked in itertools.product(max_num_seqs_options, token_budget_options,
                                                   (False, True)):
        config = {"max_num_seqs": seqs, "max_num_batched_tokens": budget,
                  "enable_chunked_prefill": chunked}
        try:
            trace = run_config(workload, config, cost_model)
        except ValueError:                      # a prompt longer than the budget, unchunked
            continue
        report = latency_report(trace)
        if report["ttft"][99] > ttft_p99_slo or report["tpot"][99] > tpot_p99_slo:
            continue
        if throughput(trace) > best_throughput:
            best, best_throughput = config, throughput(trace)
    return best
