"""What `generate` and `step` hand back — the same shape as vLLM's outputs.

    out.request_id, out.prompt, out.prompt_token_ids, out.finished
    out.outputs[0].text / .token_ids / .finish_reason  ("stop" | "length" | "abort" | "error")
    out.error                  what went wrong when finish_reason is "error" (else None)
    out.metrics.ttft / .tpot / .e2e_latency (seconds) and the raw timestamps

The latencies (TTFT, TPOT, E2E, on the engine clock) are defined once, in `sim/metrics.py`.
`EngineStats` is the engine's snapshot of its queues and KV cache (`LLMEngine.stats`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minillm.sim.metrics import end_to_end_latency, time_per_output_token, time_to_first_token


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
        return time_to_first_token(self.arrival_time, self.first_token_time)

    @property
    def tpot(self) -> float | None:
        return time_per_output_token(self.first_token_time, self.finish_time,
                                     self.num_output_tokens)

    @property
    def e2e_latency(self) -> float | None:
        return end_to_end_latency(self.arrival_time, self.finish_time)

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


def request_output(seq, tokenizer=None) -> RequestOutput:
    """A Sequence's state as the user sees it (the text decoded from its tokens so far)."""
    text = ""
    if tokenizer is not None and seq.error is None:
        text = tokenizer.decode(seq.output_token_ids, skip_special_tokens=True)
    completion = CompletionOutput(0, text, list(seq.output_token_ids), seq.finish_reason)
    metrics = RequestMetrics(seq.arrival_time, seq.first_scheduled_time, seq.first_token_time,
                             seq.finish_time, seq.num_output_tokens, seq.num_preemptions)
    return RequestOutput(seq.request_id, seq.prompt, seq.prompt_token_ids, [completion],
                         seq.is_finished, metrics, error=seq.error)


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's queues and KV cache (`LLMEngine.stats`)."""

    num_running: int = 0          # sequences in the running batch
    num_waiting: int = 0          # queued, or added and not yet handed to the scheduler
    num_free_blocks: int = 0      # KV-cache blocks nobody holds
    num_blocks: int = 0           # KV-cache blocks in total

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV blocks in use (vLLM's kv_cache_usage_perc: 1.0 means full)."""
        return 1.0 - self.num_free_blocks / self.num_blocks if self.num_blocks else 0.0
