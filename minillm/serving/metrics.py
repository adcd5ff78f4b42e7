"""Prometheus metrics for `GET /metrics`, with vLLM's meanings under a `minillm:` prefix.

Prometheus (and Grafana on top of it) scrapes a plain-text page of numbers every few
seconds. Three kinds of number, one `prometheus_client` class each:

* **gauges** — a value right now: `minillm:num_requests_running`,
  `minillm:num_requests_waiting`, `minillm:kv_cache_usage_perc` (0..1, 1 = full);
* **counters** — only go up (`_total` is appended): `minillm:prompt_tokens`,
  `minillm:generation_tokens`, `minillm:num_preemptions`,
  `minillm:request_success{finished_reason}`, `minillm:num_requests_shed`;
  a dashboard turns them into rates (generated tokens per second);
* **histograms** (直方图) — counts per latency bucket plus a sum:
  `minillm:time_to_first_token_seconds`, `minillm:inter_token_latency_seconds`,
  `minillm:e2e_request_latency_seconds`, `minillm:request_time_per_output_token_seconds`,
  `minillm:request_queue_time_seconds`. Percentiles can be estimated from the buckets
  (`histogram_quantile` in PromQL), only as finely as the bucket edges allow.

Latencies here are measured in the server process, from the moment the HTTP handler
received the request to the moment the engine loop got the token — not what the client
sees (that adds the network, the client's own parsing, and any wait for a busy client).
`RequestLog` keeps the same numbers per request, plus the engine's own clock, for the
last few thousand requests (`GET /minillm/requests`), so a benchmark can put the client's
TTFT next to the server's for the *same* request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram,
                               disable_created_metrics, generate_latest)

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 3,
                4, 5, 7.5, 10, 15, 20, 30, 60, 120)
ITL_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3,
               0.5, 0.75, 1, 2.5, 5)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300)


@dataclass
class _Live:
    """What the server has seen of one running request so far."""

    received_at: float
    num_prompt_tokens: int
    num_tokens: int = 0
    last_token_at: float = 0.0
    first_token_at: float | None = None
    num_preemptions: int = 0


class ServerMetrics:
    """The engine loop's observer: it is told about admissions, outputs, steps, aborts."""

    def __init__(self, model_name: str, log_size: int = 4096):
        disable_created_metrics()              # no `_created` timestamp series
        self.registry = CollectorRegistry()
        reg, labels = self.registry, ["model_name"]

        def one(metric):
            return metric.labels(model_name)

        self.running = one(Gauge("minillm:num_requests_running", "Requests in the running "
                                 "batch.", labels, registry=reg))
        self.waiting = one(Gauge("minillm:num_requests_waiting", "Requests waiting to run.",
                                 labels, registry=reg))
        self.kv_usage = one(Gauge("minillm:kv_cache_usage_perc", "KV-cache usage. 1 means "
                                  "100 percent usage.", labels, registry=reg))
        self.kv_free = one(Gauge("minillm:kv_cache_free_blocks", "KV-cache blocks free.",
                                 labels, registry=reg))
        self.kv_total = one(Gauge("minillm:kv_cache_total_blocks", "KV-cache blocks in total.",
                                  labels, registry=reg))
        self.preemptions = one(Counter("minillm:num_preemptions", "Cumulative number of "
                                       "preemptions.", labels, registry=reg))
        self.prompt_tokens = one(Counter("minillm:prompt_tokens", "Prompt tokens of requests "
                                         "that got their first token.", labels, registry=reg))
        self.generation_tokens = one(Counter("minillm:generation_tokens", "Tokens generated.",
                                             labels, registry=reg))
        self.shed = one(Counter("minillm:num_requests_shed", "Requests answered 503 because "
                                "the queue was full.", labels, registry=reg))
        self.success = Counter("minillm:request_success", "Finished requests by reason.",
                               labels + ["finished_reason"], registry=reg)
        self.model_name = model_name

        def histogram(name, doc, buckets):
            return one(Histogram(name, doc, labels, buckets=buckets, registry=reg))

        self.ttft = histogram("minillm:time_to_first_token_seconds", "Request received → "
                              "first token, in the server.", TTFT_BUCKETS)
        self.itl = histogram("minillm:inter_token_latency_seconds", "Gap between a request's "
                             "consecutive outputs, in the server.", ITL_BUCKETS)
        self.tpot = histogram("minillm:request_time_per_output_token_seconds", "Per request: "
                              "(finish - first token) / (tokens - 1).", ITL_BUCKETS)
        self.e2e = histogram("minillm:e2e_request_latency_seconds", "Request received → "
                             "finished, in the server.", E2E_BUCKETS)
        self.queue = histogram("minillm:request_queue_time_seconds", "Time in the engine's "
                               "waiting queue before the first step ran it.", TTFT_BUCKETS)
        self.log = RequestLog(log_size)
        self._live: dict[str, _Live] = {}

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # ------------------------------------------------------------ observer hooks
    def on_added(self, request_id: str, num_prompt_tokens: int, received_at: float) -> None:
        self._live[request_id] = _Live(received_at, num_prompt_tokens)

    def on_step(self, stats) -> None:
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        self.kv_usage.set(stats.kv_cache_usage)
        self.kv_free.set(stats.num_free_blocks)
        self.kv_total.set(stats.num_blocks)

    def on_output(self, output, now: float) -> None:
        live = self._live.get(output.request_id)
        if live is None:
            return
        num_tokens = len(output.outputs[0].token_ids)
        if num_tokens > live.num_tokens:
            if live.first_token_at is None:
                live.first_token_at = now
                self.ttft.observe(now - live.received_at)
                self.prompt_tokens.inc(live.num_prompt_tokens)
            else:
                self.itl.observe(now - live.last_token_at)
            self.generation_tokens.inc(num_tokens - live.num_tokens)
            live.num_tokens, live.last_token_at = num_tokens, now
        metrics = output.metrics
        if metrics is not None and metrics.num_preemptions > live.num_preemptions:
            self.preemptions.inc(metrics.num_preemptions - live.num_preemptions)
            live.num_preemptions = metrics.num_preemptions
        if output.finished:
            self._finish(output, live, now)

    def on_aborted(self, request_id: str, asked_at_step: int, applied_at_step: int) -> None:
        live = self._live.pop(request_id, None)
        if live is None:
            return
        self.success.labels(self.model_name, "abort").inc()
        self.log.add(request_id, live, "abort", None, steps_to_abort=applied_at_step - asked_at_step)

    def on_shed(self) -> None:
        self.shed.inc()

    def _finish(self, output, live: _Live, now: float) -> None:
        del self._live[output.request_id]
        reason = output.outputs[0].finish_reason or "stop"
        self.success.labels(self.model_name, reason).inc()
        self.e2e.observe(now - live.received_at)
        if live.num_tokens > 1:
            self.tpot.observe((now - live.first_token_at) / (live.num_tokens - 1))
        metrics = output.metrics
        if metrics is not None and metrics.queue_time is not None:
            self.queue.observe(metrics.queue_time)
        self.log.add(output.request_id, live, reason, metrics, finished_at=now)


class RequestLog:
    """The last `size` finished requests, as plain dicts (`GET /minillm/requests`)."""

    def __init__(self, size: int):
        self.records: deque[dict] = deque(maxlen=size)

    def add(self, request_id: str, live: _Live, reason: str, metrics, *,
            finished_at: float | None = None, steps_to_abort: int | None = None) -> None:
        first = live.first_token_at
        self.records.append({
            "request_id": request_id, "prompt_tokens": live.num_prompt_tokens,
            "completion_tokens": live.num_tokens, "finish_reason": reason,
            "server_ttft_s": None if first is None else first - live.received_at,
            "server_e2e_s": None if finished_at is None else finished_at - live.received_at,
            "engine_ttft_s": None if metrics is None else metrics.ttft,
            "engine_queue_s": None if metrics is None else metrics.queue_time,
            "engine_e2e_s": None if metrics is None else metrics.e2e_latency,
            "num_preemptions": live.num_preemptions, "steps_to_abort": steps_to_abort})

    def find(self, request_ids=None) -> list[dict]:
        if request_ids is None:
            return list(self.records)
        wanted = set(request_ids)
        return [r for r in self.records if r["request_id"] in wanted]
