"""Decode step time vs batch size, beside the roofline ceiling of this machine.

One decode step reads every weight once whatever the batch, so at small batches the
step time barely grows with the batch and tokens/s grows almost linearly — until the
arithmetic catches up with the memory traffic (`roofline.py`). Each batch size runs
decode-only steps at about the same context; the ceiling is computed from the
bandwidth and FLOP/s measured in the same run.

Printed: step ms, tokens/s, ceiling ms and tokens/s, which roof binds, and step /
ceiling, with the target at batch 16. Real model.
"""

from __future__ import annotations

import gc
from functools import partial

from benchmarks.ab import alternate, median
from benchmarks.common import figure, num, run_workload, save, table, warm_up
from benchmarks.roofline import ceiling, decode_cost, measure_bandwidth, measure_matmul_flops
from minillm.sim.workload import RequestSpec
from minillm.widgets.style import COLORS

TARGET_X_CEILING = 1.5               # at batch 16, step / roofline step


def batches(quick: bool) -> tuple[int, ...]:
    return (1, 2, 4) if quick else (1, 2, 4, 8, 16, 32)


def planned_runs(config) -> int:
    return len(batches(config.quick)) * config.rounds + 1         # + the roofline


def decode_step_time(bench, llm, batch: int, context: int, steps: int) -> dict:
    """Median duration of decode-only steps with `batch` sequences at ~`context` tokens."""
    n = steps + 2                         # first token (prefill), one warm decode, `steps`
    specs = [RequestSpec(f"b{batch}-{i}", context, n, n) for i in range(batch)]
    trace = run_workload(llm, specs, bench.prompts(specs))
    decode = [s.duration for s in trace.steps
              if len(s.scheduled) == batch and s.num_prefill_tokens == 0][1:]
    return {"step_s": median(decode), "num_steps": len(decode)}


def ceiling_rows(rounds: dict[int, list[float]], cost, context: int, bandwidth: dict,
                 matmul: dict) -> list[dict]:
    """One row per batch size: the median step of its rounds beside the roofline."""
    rows = []
    for b, values in rounds.items():
        step_s = median(values)
        roof = ceiling(cost, b, context, bandwidth["best_gb_s"], matmul["best_gflop_s"])
        rows.append({"batch": b, "step_s": step_s, "tokens_per_s": b / step_s, "rounds": values,
                     "ceiling_step_s": roof["step_s"], "ceiling_tokens_per_s": roof["tokens_per_s"],
                     "bound": roof["bound"], "memory_s": roof["memory_s"],
                     "compute_s": roof["compute_s"], "x_ceiling": step_s / roof["step_s"]})
    return rows


def run(bench) -> dict:
    cfg = bench.config
    sizes = batches(cfg.quick)
    context, steps = (16, 3) if cfg.quick else (128, 8)
    llm = bench.make_llm(max_num_seqs=max(sizes),
                         num_kv_blocks=max(sizes) * ((context + steps + 2) // 16 + 2))
    warm_up(llm, bench.prompts([RequestSpec("warm", context, 1, 1)] * 2))
    runners = {str(b): partial(decode_step_time, bench, llm, b, context, steps) for b in sizes}
    results = alternate(runners, cfg.rounds, on_run=bench.tick)
    bandwidth = measure_bandwidth(64 << 20 if cfg.quick else 512 << 20)
    matmul = measure_matmul_flops(512 if cfg.quick else 1536, dtype=bench.dtype)
    bench.tick("roofline", 0)
    cost = decode_cost(llm.model)
    mean_context = context + 1 + steps // 2
    rounds = {b: [r["step_s"] for r in results[str(b)]] for b in sizes}
    rows = ceiling_rows(rounds, cost, mean_context, bandwidth, matmul)
    backend = llm.trace.config["attention_backend"]
    del llm
    gc.collect()
    return {"context": mean_context, "bandwidth": bandwidth, "matmul": matmul,
            "decode_cost": cost.to_dict(), "rows": rows, "dtype": cfg.dtype,
            "attention_backend": backend}


def text(r: dict) -> str:
    bw, mm = r["bandwidth"], r["matmul"]
    backend = f", attention backend {r['attention_backend']!r}" if "attention_backend" in r else ""
    head = (f"Decode step vs batch (context ≈ {r['context']} tokens, {r['dtype']}{backend}); roofline: "
            f"memory {bw['best_gb_s']:.1f} GB/s (copy of {bw['bytes'] >> 20} MiB, best of "
            f"{bw['repeats']}), compute {mm['best_gflop_s']:.0f} GFLOP/s ({mm['n']}³ matmul, "
            f"{mm['kernel']} kernel), "
            f"{r['decode_cost']['weight_bytes'] / 1e6:.0f} MB of weights per step")
    rows = [[row["batch"], f"{1000 * row['step_s']:.1f}", num(row["tokens_per_s"]),
             f"{1000 * row['ceiling_step_s']:.1f}", num(row["ceiling_tokens_per_s"]), row["bound"],
             f"{row['x_ceiling']:.2f}×"] for row in r["rows"]]
    lines = [head, table(["batch", "step ms", "tokens/s", "ceiling ms", "ceiling tok/s", "bound",
                          "step / ceiling"], rows)]
    at16 = [row for row in r["rows"] if row["batch"] == 16]
    if at16:
        x = at16[0]["x_ceiling"]
        lines.append(f"batch 16: {x:.2f}× the roofline step — target ≤ {TARGET_X_CEILING}×: "
                     f"{'met' if x <= TARGET_X_CEILING else 'NOT met'}")
    return "\n".join(lines)


def plot(r: dict, path) -> None:
    """Step time and tokens/s vs batch (log2 axis), measured and at the ceiling."""
    fig, (ax1, ax2) = figure(2)
    b = [row["batch"] for row in r["rows"]]
    panels = ((ax1, "step_s", "ceiling_step_s", 1000, "decode step (ms)", "one decode step",
               "roofline (fastest possible)"),
              (ax2, "tokens_per_s", "ceiling_tokens_per_s", 1, "decode tokens / s",
               "decode throughput vs batch", "roofline ceiling"))
    for ax, key, roof_key, scale, ylabel, title, roof_label in panels:
        ax.plot(b, [scale * row[key] for row in r["rows"]], "o-", color=COLORS["continuous"],
                label="minillm, measured")
        ax.plot(b, [scale * row[roof_key] for row in r["rows"]], "--", color=COLORS["text"],
                label=roof_label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (sequences)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend()
    save(fig, path)
