"""Lesson 08 — serving metrics from timestamps, and a configuration chosen by SLA.

Your turn: replace each `raise NotImplementedError` with your code, then run the check
cell at the end of lesson 08 (or `python -m minillm.grading 08`).

Part (a) turns raw timestamps into the numbers a serving benchmark reports: TTFT,
TPOT, ITL, E2E, and their percentiles. The tests compare yours with `minillm.sim.metrics`
on a simulator Trace. Part (b) uses them: search the engine's knobs for the
configuration that meets a latency SLA with the highest throughput. The tests
re-simulate the configuration you return.

The answer key's metrics are in `minillm/sim/metrics.py` (`ttft`, `tpot`, `e2e`,
`percentiles`, `summarize`); `run_config` drives `minillm/sim/simulate.py::simulate`.
"""

from __future__ import annotations

import itertools  # noqa: F401  (handy for part b)

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
    raise NotImplementedError("Your turn: ttft = token_times[0] - arrival_time, ...")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of ``values``, by linear interpolation.

    Sort the values: ``x[0] <= … <= x[n-1]``. The q-th percentile sits at the
    fractional index ``h = (n − 1) · q / 100``; with ``i = floor(h)`` it is
    ``x[i] + (h − i) · (x[i+1] − x[i])`` (just ``x[i]`` when ``i == n − 1``). This is
    NumPy's default method (Hyndman & Fan type 7), the one `minillm.sim.metrics` and most
    benchmark tools use. Return ``float("nan")`` for an empty list.

    Example: percentile([4, 1, 3, 2], 50) = 2.5; percentile([1, 2, 3, 4, 5], 90) = 4.6.
    """
    raise NotImplementedError("Your turn: sort, h = (n - 1) * q / 100, interpolate")


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
    raise NotImplementedError("Your turn: collect the four lists, then their percentiles")


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
    raise NotImplementedError("Your turn: simulate every configuration, keep the best one that meets the SLA")
