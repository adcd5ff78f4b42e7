"""Every experiment of `python -m benchmarks`, by the name `--only` takes.

An experiment is a module with

    planned_runs(config) -> int    how many times it ticks the progress bar
    run(bench) -> dict             numbers only (JSON-ready), in the experiment's own shape
    text(result) -> str            the table a person reads, ending with its ratios
    plot(result, path)             its PNG, `<name>.png` (or `plot = None`)

and optionally `DETACHED = {key: file name}`: parts of the result written to their
own JSON file instead of `bench.json` (they are large). A new experiment is one new
module plus one line here; the dict's order is the order they run in.
"""

from __future__ import annotations

from benchmarks import (chunked, kv_budget, peers, prefix_caching, simulator, speculative,
                           step_time, throughput)

EXPERIMENTS = {
    "throughput": throughput,          # static vs continuous vs chunked, skewed burst    real model
    "kv_budget": kv_budget,            # max concurrent sequences, contiguous vs paged    simulator
    "chunked": chunked,                # ITL / TTFT with and without chunked prefill      real model
    "step_time": step_time,            # decode step vs batch, beside the roofline        real model
    "simulator": simulator,            # wall time to simulate 1000 requests              simulator
    "prefix_caching": prefix_caching,  # prefix cache off / on, shared system prompt      real model
    "speculative": speculative,        # prompt-lookup speculation off / on               real model
}

# `--peers`: minillm vs transformers (and vLLM); runs after the chosen experiments
PEERS = {"peers": peers}
