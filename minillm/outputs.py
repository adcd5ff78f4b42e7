"""What `generate` and `step` hand back — the same shape as vLLM's outputs.

    out.request_id, out.prompt, out.prompt_token_ids, out.finished
    out.outputs[0].text / .token_ids / .finish_reason  ("stop" | "length" | "abort" | "error")
    out.error                  what went wrong when finish_reason is "error" (else None)
    out.metrics.ttft / .tpot / .e2e_latency (seconds) and the raw timestamps

Latency definitions (all on the engine clock):

* TTFT, time to first token = first token time − arrival time (queueing + prefill);
* TPOT, time per output token = (finish − first token) / (output tokens − 1):
  the average gap between tokens after the first;
* E2E latency = finish − arrival.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    num_output_tokens: int = 0
    num_preemptions: int = 0

    @property
    def ttft(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def tpot(self) -> float | None:
        if self.finish_time is None or self.first_token_time is None or self.num_output_tokens < 2:
            return None
        return (self.finish_time - self.first_token_time) / (self.num_output_tokens - 1)

    @property
    def e2e_latency(self) -> float | None:
        if self.finish_time is None:
            return None
        return self.finish_time - self.arrival_time

    @property
    def queue_time(self) -> float | None:
        if self.first_scheduled_time is None:
            return None
        return self.first_scheduled_time - self.arrival_time


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics = field(repr=False, default=None)
    error: str | None = None          # minillm extra: why it failed (finish_reason "error")
