"""Latency with and without chunked prefill, long prompts arriving during decodes.

Decode streams start at t = 0 (short prompts, long answers); long prompts arrive
(Poisson) while they decode. Without chunking, a long prompt is prefilled whole in one
step and every stream waits that step out: a stall in its inter-token latency (ITL).
Chunked prefill (分块预填充) caps a step's tokens at the chunk budget, so the prompt
is spread over several steps that also carry the streams' decodes.

Printed: ITL P99 (all requests, and the streams only), the longest stall of a stream,
TTFT P50 (all, and the long prompts only), tokens/s; and the ratios no chunking /
chunked. Real model.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, replace

import numpy as np

from benchmarks.ab import medians, paired_ratios, summary
from benchmarks.common import (compare_modes, figure, kv_blocks_for, ms, num, ratio_line,
                                  run_numbers, save, table, workload_stats)
from minillm.engine.trace import Trace
from minillm.sim.metrics import percentiles, request_metrics
from minillm.sim.workload import RequestSpec, fixed, make_workload, uniform
from minillm.widgets.style import COLORS

MODES = ("continuous", "chunked")
LABELS = {"continuous": "no chunking", "chunked": "chunked"}


@dataclass(frozen=True)
class ChunkedShape:
    """Decode streams from t = 0, then long prompts arriving at `long_rate` per second."""

    num_streams: int = 8             # short prompts, long answers: they decode throughout
    stream_prompt: int = 32
    stream_output: int = 160
    num_long: int = 6                # long prompts, short answers: big prefills
    long_prompt_low: int = 768
    long_prompt_high: int = 1280
    long_output: int = 16
    long_rate: float = 1.0           # Poisson arrivals per second
    long_start: float = 0.5          # the first long prompt arrives this late


FULL_CHUNKED = ChunkedShape()
QUICK_CHUNKED = ChunkedShape(num_streams=3, stream_prompt=8, stream_output=24, num_long=3,
                             long_prompt_low=96, long_prompt_high=160, long_output=4,
                             long_rate=20.0, long_start=0.01)


def chunked_workload(shape: ChunkedShape = FULL_CHUNKED, seed: int = 0) -> list[RequestSpec]:
    """Streams (`stream-i`, a burst at t = 0) plus long prompts (`long-j`, Poisson from
    `long_start`)."""
    streams = make_workload(shape.num_streams, fixed(shape.stream_prompt),
                            fixed(shape.stream_output), arrival="burst",
                            max_tokens="output_len", seed=seed)
    longs = make_workload(shape.num_long, uniform(shape.long_prompt_low, shape.long_prompt_high),
                          fixed(shape.long_output), arrival="poisson", rate=shape.long_rate,
                          max_tokens="output_len", seed=seed + 1)
    streams = [replace(s, request_id=f"stream-{i}") for i, s in enumerate(streams)]
    longs = [replace(s, request_id=f"long-{i}", arrival_time=s.arrival_time + shape.long_start)
             for i, s in enumerate(longs)]
    return streams + longs


def planned_runs(config) -> int:
    return len(MODES) * config.rounds


def group_latency(trace: Trace, prefix: str) -> dict:
    """TTFT / ITL percentiles of the requests whose id starts with `prefix`."""
    sub = Trace(config=trace.config, steps=trace.steps,
                requests={k: r for k, r in trace.requests.items() if k.startswith(prefix)})
    m = request_metrics(sub)
    return {"ttft_p50": percentiles(m["ttft"])[50], "itl_p99": percentiles(m["itl"])[99],
            "itl_max": float(m["itl"].max()) if m["itl"].size else float("nan")}


def latency_numbers(trace: Trace) -> dict:
    """The run's numbers, and the same latencies for the streams and the long prompts."""
    return {**run_numbers(trace, peak=False),
            **{f"streams_{k}": v for k, v in group_latency(trace, "stream-").items()},
            **{f"long_{k}": v for k, v in group_latency(trace, "long-").items()}}


def run(bench) -> dict:
    cfg = bench.config
    shape = QUICK_CHUNKED if cfg.quick else FULL_CHUNKED
    specs = chunked_workload(shape, cfg.seed)
    prompts = bench.prompts(specs)
    llms = bench.mode_llms(MODES, kv_blocks_for(specs, cfg.max_num_seqs))
    runs, traces = compare_modes(bench, llms, specs, prompts, measure=latency_numbers,
                                 num_warm=2)
    del llms
    gc.collect()
    return {"workload": {**workload_stats(specs), "shape": vars(shape),
                         "chunk_budget": cfg.chunk_budget},
            "runs": runs, "medians": medians(runs),
            "ratios": {k: summary(paired_ratios(runs, "continuous", "chunked", k))
                       for k in ("itl_p99", "ttft_p50", "streams_itl_p99", "long_ttft_p50")},
            "itl": {n: request_metrics(t)["itl"].tolist() for n, t in traces.items()}}


def text(r: dict) -> str:
    w, m = r["workload"], r["medians"]
    s = w["shape"]
    head = (f"Chunked prefill — {s['num_streams']} decode streams from t=0, {s['num_long']} prompts of "
            f"{s['long_prompt_low']}–{s['long_prompt_high']} tokens arriving (Poisson, "
            f"{s['long_rate']}/s); chunk budget {w['chunk_budget']} tokens; real model")
    keys = [("ITL P99 (all)", "itl_p99", ms), ("ITL P99 (decode streams)", "streams_itl_p99", ms),
            ("longest stall of a stream", "streams_itl_max", ms), ("TTFT P50 (all)", "ttft_p50", ms),
            ("TTFT P50 (long prompts)", "long_ttft_p50", ms),
            ("generated tokens/s", "generated_tokens_per_s", num)]
    rows = [[label, fmt(m["continuous"][k]), fmt(m["chunked"][k])] for label, k, fmt in keys]
    ratios = r["ratios"]
    return "\n".join([head, table(["", LABELS["continuous"], LABELS["chunked"]], rows),
                      ratio_line("ITL P99, no chunking / chunked", ratios["itl_p99"]),
                      ratio_line("TTFT P50, no chunking / chunked", ratios["ttft_p50"])])


def plot(r: dict, path) -> None:
    """The ITL tail (fraction of gaps ≥ x, log-log) and the four latencies as bars."""
    fig, (ax1, ax2) = figure(2)
    for mode in MODES:
        itl = np.sort(np.asarray(r["itl"][mode])) * 1000
        if itl.size:
            frac = 1.0 - np.arange(itl.size) / itl.size
            ax1.step(itl, frac, where="post", color=COLORS[mode], label=LABELS[mode])
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("inter-token latency (ms)")
    ax1.set_ylabel("fraction of gaps ≥ x")
    ax1.set_title("ITL tail (first round)")
    ax1.legend()
    m = r["medians"]
    labels = ["ITL P99", "ITL P99 streams", "TTFT P50", "TTFT P50 long"]
    keys = ["itl_p99", "streams_itl_p99", "ttft_p50", "long_ttft_p50"]
    x = np.arange(len(keys))
    for offset, mode in ((-0.2, "continuous"), (0.2, "chunked")):
        ax2.bar(x + offset, [m[mode][k] * 1000 for k in keys], 0.4, color=COLORS[mode],
                label=LABELS[mode])
    ax2.set_xticks(x, labels)
    ax2.set_ylabel("ms (median of rounds)")
    ax2.set_title("latency with and without chunked prefill")
    ax2.legend()
    save(fig, path)
