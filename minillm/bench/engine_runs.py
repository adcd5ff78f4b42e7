"""Driving minillm's engine with a workload: requests arrive when the workload says.

`LLM.generate` hands every prompt to the engine at once. A benchmark also needs
*arrival times* (Poisson traffic), so it talks to `llm.llm_engine` directly — the same
loop `generate` runs, with `arrival_time` set per request:

    engine.start_new_trace()             fresh Trace, clock back to 0
    engine.add_request(..., arrival_time=t)   the engine admits it once the clock reaches t
    while engine.has_unfinished_requests(): engine.step()

Every run is checked: each request must have produced exactly its `output_len` tokens
(EOS is ignored and `max_tokens` = output_len), or the throughput would compare
different amounts of work.
"""

from __future__ import annotations

import gc

from minillm.kv_cache import cdiv
from minillm.metrics import summarize
from minillm.sampling_params import SamplingParams
from minillm.trace import Trace
from minillm.workload import RequestSpec


def kv_blocks_for(specs: list[RequestSpec], max_num_seqs: int, block_size: int = 16) -> int:
    """Enough KV blocks for `max_num_seqs` of the workload's largest requests at once.

    Sized so that neither the paged nor the contiguous (static) cache ever runs out:
    throughput then measures scheduling, not preemption. (The fixed-budget experiment
    is where memory runs out on purpose.)
    """
    largest = max(s.prompt_len + s.max_tokens for s in specs)
    return max_num_seqs * cdiv(largest, block_size) + 1


def run_specs(llm, specs: list[RequestSpec], prompts: list[list[int]],
              tokens: dict[str, list[int]] | None = None) -> Trace:
    """Run the workload to completion on `llm` (greedy, EOS ignored); its Trace.

    Pass a dict as `tokens` to also get each request's generated token ids.
    """
    engine = llm.llm_engine
    if engine.has_unfinished_requests():
        raise RuntimeError("the engine still has requests; finish them before a bench run")
    gc.collect()                                   # no collector pause inside the timing
    engine.start_new_trace()
    for spec, prompt in zip(specs, prompts, strict=True):
        params = SamplingParams(temperature=0.0, max_tokens=spec.max_tokens, ignore_eos=True)
        engine.add_request(spec.request_id, {"prompt_token_ids": prompt}, params,
                           arrival_time=spec.arrival_time, priority=spec.priority)
    while engine.has_unfinished_requests():
        for out in engine.step():
            if tokens is not None and out.finished:
                tokens[out.request_id] = list(out.outputs[0].token_ids)
    trace = engine.trace
    check_output_lengths(trace, specs)
    return trace


def check_output_lengths(trace: Trace, specs: list[RequestSpec]) -> None:
    """Every request generated exactly its output_len tokens (raises otherwise)."""
    wrong = [(s.request_id, trace.requests[s.request_id].output_len, s.output_len)
             for s in specs if trace.requests[s.request_id].output_len != s.output_len]
    if wrong:
        raise RuntimeError(f"requests generated the wrong number of tokens "
                           f"(id, got, wanted): {wrong[:5]}")


def run_summary(llm, specs: list[RequestSpec], prompts: list[list[int]]) -> dict:
    """`run_specs` + `metrics.summarize`, plus peak concurrency; the Trace under "trace"."""
    trace = run_specs(llm, specs, prompts)
    out = summarize(trace)
    out["max_running"] = max((len(s.scheduled) for s in trace.steps), default=0)
    out["trace"] = trace
    return out


def warm_up(llm, prompts: list[list[int]], max_tokens: int = 4) -> None:
    """A short untimed run: the first forward allocates and picks kernels."""
    specs = [RequestSpec(f"warmup-{i}", len(p), max_tokens, max_tokens)
             for i, p in enumerate(prompts)]
    run_specs(llm, specs, prompts)
