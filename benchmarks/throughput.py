"""Throughput: static vs continuous vs continuous + chunked, on a skewed burst.

The workload is a burst of requests whose output lengths follow a capped Pareto law:
most answers are short, a few are very long. That skew is what static batching
(静态批处理) handles worst: a batch lasts as long as its longest member, so the short
members' slots sit idle. Continuous batching refills a slot the step after it frees.

Printed: useful generated tokens/s, wall time, engine steps, slot utilisation, KV
waste, TTFT and ITL per mode, and the ratio continuous / static against its target.
Real model; EOS is ignored and `max_tokens` is each request's drawn length, so every
mode generates exactly the same tokens.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

from benchmarks.ab import medians, paired_ratios, summary
from benchmarks.common import (bars_with_rounds, compare_modes, figure, kv_blocks_for, ms,
                                  num, pct, ratio_line, save, table, workload_stats)
from minillm.engine.trace import Trace
from minillm.sim.workload import RequestSpec, lognormal, make_workload, pareto
from minillm.widgets.style import COLORS

MODES = ("static", "continuous", "chunked")
TARGET = 2.5                         # continuous / static, useful tokens/s
DETACHED = {"traces": "throughput-traces.json"}    # too large for bench.json


@dataclass(frozen=True)
class ThroughputShape:
    """How the throughput workload is drawn (see `throughput_workload`)."""

    num_requests: int = 192
    prompt_median: int = 32          # lognormal prompt lengths, sigma 0.5
    prompt_cap: int = 128
    output_minimum: int = 4          # Pareto output lengths: P(X > x) = (minimum/x)^alpha
    output_alpha: float = 1.0        # alpha 1: half the answers ≤ 8 tokens, 1 in 32 hits the cap
    output_cap: int = 128


FULL_THROUGHPUT = ThroughputShape()
QUICK_THROUGHPUT = ThroughputShape(num_requests=12, prompt_median=16, prompt_cap=48,
                                   output_minimum=2, output_alpha=1.0, output_cap=24)


def throughput_workload(shape: ThroughputShape = FULL_THROUGHPUT, seed: int = 0) -> list[RequestSpec]:
    """A burst of `shape.num_requests` requests; output lengths heavy-tailed (Pareto).

    Why so many requests: in a burst, continuous batching cannot finish before the
    last-admitted long request does, so a short burst mostly measures that tail. With
    a dozen static batches' worth of requests the queue stays full for most of the
    run, which is the regime a server lives in.
    """
    return make_workload(shape.num_requests,
                         lognormal(shape.prompt_median, 0.5, cap=shape.prompt_cap),
                         pareto(shape.output_minimum, shape.output_alpha, cap=shape.output_cap),
                         arrival="burst", max_tokens="output_len", seed=seed)


def planned_runs(config) -> int:
    return len(MODES) * config.rounds


def run(bench) -> dict:
    """Useful generated tokens/s of each mode, alternating rounds, same KV cache size."""
    cfg = bench.config
    shape = QUICK_THROUGHPUT if cfg.quick else FULL_THROUGHPUT
    specs = throughput_workload(shape, cfg.seed)
    prompts = bench.prompts(specs)
    blocks = kv_blocks_for(specs, cfg.max_num_seqs)
    llms = bench.mode_llms(MODES, blocks)
    runs, traces = compare_modes(bench, llms, specs, prompts)
    del llms
    gc.collect()
    key = "generated_tokens_per_s"
    return {"workload": {**workload_stats(specs), "shape": vars(shape),
                         "max_num_seqs": cfg.max_num_seqs, "num_kv_blocks": blocks},
            "runs": runs, "medians": medians(runs),
            "ratios": {"continuous/static": summary(paired_ratios(runs, "continuous", "static", key)),
                       "chunked/static": summary(paired_ratios(runs, "chunked", "static", key))},
            "traces": {name: t.to_dict() for name, t in traces.items()}}


def text(r: dict) -> str:
    w, m = r["workload"], r["medians"]
    modes = list(m)
    head = (f"Throughput — burst of {w['num_requests']} requests, {w['output_tokens']:,} output tokens "
            f"(Pareto: median {w['output_median']:.0f}, max {w['output_max']}), EOS ignored, "
            f"{w['max_num_seqs']} slots; real model")
    rows = [["useful generated tokens/s", *(num(m[k]["generated_tokens_per_s"]) for k in modes)],
            ["wall time", *(f"{m[k]['duration_s']:.1f} s" for k in modes)],
            ["engine steps", *(f"{m[k]['num_steps']:.0f}" for k in modes)],
            ["slot utilisation", *(pct(m[k]["slot_utilization"]) for k in modes)],
            ["KV waste (reserved, empty)", *(pct(m[k]["kv_waste"]) for k in modes)],
            ["TTFT P50", *(ms(m[k]["ttft_p50"]) for k in modes)],
            ["ITL P99", *(ms(m[k]["itl_p99"]) for k in modes)]]
    notes = ("KV: static = contiguous reservation of prompt + max_tokens (here max_tokens = the "
             "exact length, so only the not-yet-generated part is empty); continuous = paged.")
    return "\n".join([head, table(["", *modes], rows), notes,
                      ratio_line("continuous / static", r["ratios"]["continuous/static"], TARGET),
                      ratio_line("chunked / static", r["ratios"]["chunked/static"])])


def plot(r: dict, path) -> None:
    """Tokens/s per mode (bars: median, dots: rounds) and busy slots over time."""
    fig, (ax1, ax2) = figure(2)
    modes = list(r["runs"])
    bars_with_rounds(ax1, modes, r["runs"], "generated_tokens_per_s", [COLORS[m] for m in modes])
    ax1.set_ylabel("useful generated tokens / s")
    ax1.set_title(f"continuous / static = {r['ratios']['continuous/static']['median']:.2f}× "
                  "(bars: median, dots: rounds)")
    for mode in ("static", "continuous"):
        trace = Trace.from_dict(r["traces"][mode])
        t = [s.end_time for s in trace.steps]
        busy = [len(s.scheduled) for s in trace.steps]
        ax2.step(t, busy, where="pre", color=COLORS[mode], label=mode)
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("busy batch slots")
    ax2.set_title("busy slots per step (first round)")
    ax2.legend()
    save(fig, path)
