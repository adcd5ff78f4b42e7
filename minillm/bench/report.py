"""Turning the experiments' dicts into what a person reads: tables, PNGs, JSON.

Tables put the contenders side by side and end with the ratio the experiment is about,
its per-round values, and the acceptance target where the project has one. Plots use
the course colours (`minillm.widgets.style`): static red, continuous green, chunked
blue.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from minillm.widgets.style import COLORS

MODE_COLORS = {"static": COLORS["static"], "continuous": COLORS["continuous"],
               "chunked": COLORS["chunked"]}
TARGETS = {"continuous/static": 2.5, "x_ceiling": 1.5,
           "minillm continuous / transformers generate": 4.0,
           "minillm continuous / transformers CB": 3.0, "minillm continuous / vLLM": 0.8}


# ------------------------------------------------------------------ text

def table(header: list[str], rows: list[list]) -> str:
    """Columns padded to their widest cell; first column left-aligned, others right."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)      # noqa: E731
                              for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(cells[0]), "  ".join("-" * w for w in widths)] + [fmt(r) for r in cells[1:]])


def pct(x: float) -> str:
    return "—" if x is None or x != x else f"{100 * x:.1f}%"


def ms(x: float) -> str:
    return "—" if x is None or x != x else f"{1000 * x:.0f} ms"


def num(x: float, digits: int = 1) -> str:
    return "—" if x is None or x != x else f"{x:,.{digits}f}"


def ratio_line(name: str, s: dict, target: float | None = None, higher: bool = True) -> str:
    """'continuous/static: 3.10× (rounds 3.02 3.10 3.21) — target ≥ 2.5×: met'."""
    rounds = " ".join(f"{v:.2f}" for v in s["values"])
    line = f"{name}: {s['median']:.2f}× (per round: {rounds})"
    if target is not None:
        met = s["median"] >= target if higher else s["median"] <= target
        sign = "≥" if higher else "≤"
        line += f" — target {sign} {target}×: {'met' if met else 'NOT met'}"
    return line


def throughput_text(r: dict) -> str:
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
                      ratio_line("continuous / static", r["ratios"]["continuous/static"], 2.5),
                      ratio_line("chunked / static", r["ratios"]["chunked/static"])])


def kv_budget_text(r: dict) -> str:
    head = (f"Fixed KV budget — {r['budget_tokens']:,} token slots ({r['budget_blocks']} blocks "
            f"of {r['block_size']}), {r['workload']['num_requests']} requests sending "
            f"max_tokens={r['max_tokens_sent']}; simulator (real schedulers and block manager)")
    rows = [["max concurrent sequences", r["static"]["max_concurrent"], r["continuous"]["max_concurrent"]],
            ["mean concurrent sequences", num(r["static"]["mean_concurrent"]),
             num(r["continuous"]["mean_concurrent"])],
            ["KV waste (reserved, empty)", pct(r["static"]["kv_waste"]), pct(r["continuous"]["kv_waste"])],
            ["preemptions", r["static"]["preemptions"], r["continuous"]["preemptions"]]]
    gain = r["continuous"]["max_concurrent"] / max(r["static"]["max_concurrent"], 1)
    return "\n".join([head, table(["", "contiguous (static)", "paged (continuous)"], rows),
                      f"paged / contiguous max concurrent: {gain:.1f}×"])


def chunked_text(r: dict) -> str:
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
    return "\n".join([head, table(["", "no chunking", "chunked"], rows),
                      ratio_line("ITL P99, no chunking / chunked", ratios["itl_p99"]),
                      ratio_line("TTFT P50, no chunking / chunked", ratios["ttft_p50"])])


def step_time_text(r: dict) -> str:
    bw, mm = r["bandwidth"], r["matmul"]
    head = (f"Decode step vs batch (context ≈ {r['context']} tokens, {r['dtype']}); roofline: "
            f"memory {bw['best_gb_s']:.1f} GB/s (copy of {bw['bytes'] >> 20} MiB, best of "
            f"{bw['repeats']}), compute {mm['best_gflop_s']:.0f} GFLOP/s ({mm['n']}³ matmul), "
            f"{r['decode_cost']['weight_bytes'] / 1e6:.0f} MB of weights per step")
    rows = [[row["batch"], f"{1000 * row['step_s']:.1f}", num(row["tokens_per_s"]),
             f"{1000 * row['ceiling_step_s']:.1f}", num(row["ceiling_tokens_per_s"]), row["bound"],
             f"{row['x_ceiling']:.2f}×"] for row in r["rows"]]
    text = [head, table(["batch", "step ms", "tokens/s", "ceiling ms", "ceiling tok/s", "bound",
                         "step / ceiling"], rows)]
    at16 = [row for row in r["rows"] if row["batch"] == 16]
    if at16:
        x = at16[0]["x_ceiling"]
        text.append(f"batch 16: {x:.2f}× the roofline step — target ≤ 1.5×: "
                    f"{'met' if x <= 1.5 else 'NOT met'}")
    return "\n".join(text)


def simulator_text(r: dict) -> str:
    return (f"Simulator — {r['num_requests']} requests, {r['num_steps']:,} steps "
            f"({r['simulated_s']:.0f} s simulated) in {r['wall_s']:.2f} s of wall time "
            f"({r['steps_per_s']:,.0f} steps/s)")


def peers_text(r: dict) -> str:
    w = r["workload"]
    head = (f"Peers — {w['num_requests']} chat prompts, {w['output_tokens']:,} output tokens "
            f"(median {w['output_median']:.0f}, max {w['output_max']}), EOS ignored, "
            f"{w['max_num_seqs']} concurrent, {w['dtype']}, {w['threads']} threads")
    rows = []
    for name, runs in r["runs"].items():
        rows.append([name, num(r["medians"][name]), f"{median_of(runs, 'elapsed_s'):.1f} s",
                     pct(1 - runs[0]["useful_tokens"] / runs[0]["computed_tokens"])])
    text = [head, table(["engine", "useful tokens/s", "wall time", "wasted compute"], rows)]
    for name, s in r["ratios"].items():
        text.append(ratio_line(name, s, TARGETS.get(name)))
    text += [f"{k}: {v}" for k, v in r["skipped"].items()]
    return "\n".join(text)


def prefix_caching_text(r: dict) -> str:
    w, m = r["workload"], r["medians"]
    head = (f"Prefix caching — burst of {w['num_requests']} requests sharing a {w['shared_prefix']}-token "
            f"prompt prefix ({w['prompt_tokens']:,} prompt, {w['output_tokens']:,} output tokens), "
            f"{w['max_num_seqs']} slots, fresh cache per run; real model")
    names = list(m)
    keys = [("prompt tokens computed", "prefill_tokens_computed", lambda x: f"{x:,.0f}"),
            ("prefix-cache hit rate", "hit_rate", pct),
            ("KV blocks in use (time-average)", "mean_kv_blocks", lambda x: f"{x:.0f}"),
            ("TTFT P50", "ttft_p50", ms), ("TTFT P99", "ttft_p99", ms),
            ("generated tokens/s", "generated_tokens_per_s", num), ("wall time", "duration_s",
                                                                     lambda x: f"{x:.1f} s")]
    rows = [[label, *(fmt(m[n][k]) for n in names)] for label, k, fmt in keys]
    differ = r["outputs_differ"]
    text = [head, table(["", *names], rows)]
    text += [ratio_line(name, s) for name, s in r["ratios"].items()]
    text.append("answers identical with and without the cache: "
                + ("yes" if not differ else f"NO for {len(differ)} request(s): {differ[:5]}"))
    return "\n".join(text)


def speculative_text(r: dict) -> str:
    w, m = r["workload"], r["medians"]
    c = w["speculative_config"]
    tasks = [t for t in w if isinstance(w[t], dict) and "max_tokens" in w[t]]
    head = (f"Speculative decoding — prompt lookup (n-gram {c['prompt_lookup_min']}–{c['prompt_lookup_max']}, "
            f"k = {c['num_speculative_tokens']} guesses), {w['max_num_seqs']} slots, EOS ignored; "
            + ", ".join(f"{t}: {w[t]['num_requests']} requests × {w[t]['max_tokens']} tokens" for t in tasks)
            + "; real model")
    names = list(m)
    keys = [("generated tokens/s", "generated_tokens_per_s", num),
            ("tokens per forward pass (per request)", "tokens_per_pass", lambda x: f"{x:.2f}"),
            ("guesses accepted", "acceptance_rate", pct),
            ("engine steps", "num_steps", lambda x: f"{x:.0f}"),
            ("TPOT P50", "tpot_p50", ms)]
    rows = [[label, *(fmt(m[n][k]) for n in names)] for label, k, fmt in keys]
    text = [head, table(["", *names], rows)]
    text += [ratio_line(name, s) for name, s in r["ratios"].items()]
    for task, differ in r["outputs_differ"].items():
        text.append(f"{task}: answers identical with and without speculation: "
                    + ("yes" if not differ else f"NO for {len(differ)} request(s): {differ[:5]}"))
    return "\n".join(text)


def median_of(runs: list[dict], key: str) -> float:
    return float(np.median([run[key] for run in runs]))


TEXT = {"throughput": throughput_text, "kv_budget": kv_budget_text, "chunked": chunked_text,
        "step_time": step_time_text, "simulator": simulator_text, "peers": peers_text,
        "prefix_caching": prefix_caching_text, "speculative": speculative_text}


# ------------------------------------------------------------------ JSON

def _clean(obj):
    """NaN → None and numpy scalars → Python numbers, recursively (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(_clean(data), indent=1))


# ------------------------------------------------------------------ plots

def _fig(ncols: int, width: float = 5.2):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from minillm.widgets.style import use_course_style
    use_course_style()
    return plt.subplots(1, ncols, figsize=(width * ncols, 3.8))


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def _bars_with_rounds(ax, names, runs_by_name, key, colors):
    for i, name in enumerate(names):
        values = [r[key] for r in runs_by_name[name]]
        ax.bar(i, np.median(values), color=colors[i], alpha=0.85)
        ax.scatter([i] * len(values), values, color=COLORS["text"], s=12, zorder=3)
    ax.set_xticks(range(len(names)), names)


def plot_throughput(r: dict, path: Path) -> None:
    from minillm.trace import Trace
    fig, (ax1, ax2) = _fig(2)
    modes = list(r["runs"])
    _bars_with_rounds(ax1, modes, r["runs"], "generated_tokens_per_s", [MODE_COLORS[m] for m in modes])
    ax1.set_ylabel("useful generated tokens / s")
    ax1.set_title(f"continuous / static = {r['ratios']['continuous/static']['median']:.2f}× "
                  "(bars: median, dots: rounds)")
    for mode in ("static", "continuous"):
        trace = Trace.from_dict(r["traces"][mode])
        t = [s.end_time for s in trace.steps]
        busy = [len(s.scheduled) for s in trace.steps]
        ax2.step(t, busy, where="pre", color=MODE_COLORS[mode], label=mode)
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("busy batch slots")
    ax2.set_title("busy slots per step (first round)")
    ax2.legend()
    _save(fig, path)


def plot_chunked(r: dict, path: Path) -> None:
    fig, (ax1, ax2) = _fig(2)
    for mode, color in (("continuous", COLORS["continuous"]), ("chunked", COLORS["chunked"])):
        itl = np.sort(np.asarray(r["itl"][mode])) * 1000
        if itl.size:
            frac = 1.0 - np.arange(itl.size) / itl.size
            label = "no chunking" if mode == "continuous" else "chunked"
            ax1.step(itl, frac, where="post", color=color, label=label)
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
    ax2.bar(x - 0.2, [m["continuous"][k] * 1000 for k in keys], 0.4, color=COLORS["continuous"],
            label="no chunking")
    ax2.bar(x + 0.2, [m["chunked"][k] * 1000 for k in keys], 0.4, color=COLORS["chunked"],
            label="chunked")
    ax2.set_xticks(x, labels)
    ax2.set_ylabel("ms (median of rounds)")
    ax2.set_title("latency with and without chunked prefill")
    ax2.legend()
    _save(fig, path)


def plot_step_time(r: dict, path: Path) -> None:
    fig, (ax1, ax2) = _fig(2)
    b = [row["batch"] for row in r["rows"]]
    ax1.plot(b, [1000 * row["step_s"] for row in r["rows"]], "o-", color=COLORS["continuous"],
             label="minillm, measured")
    ax1.plot(b, [1000 * row["ceiling_step_s"] for row in r["rows"]], "--", color=COLORS["text"],
             label="roofline (fastest possible)")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("batch size (sequences)")
    ax1.set_ylabel("decode step (ms)")
    ax1.set_title("one decode step")
    ax1.legend()
    ax2.plot(b, [row["tokens_per_s"] for row in r["rows"]], "o-", color=COLORS["continuous"],
             label="minillm, measured")
    ax2.plot(b, [row["ceiling_tokens_per_s"] for row in r["rows"]], "--", color=COLORS["text"],
             label="roofline ceiling")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("batch size (sequences)")
    ax2.set_ylabel("decode tokens / s")
    ax2.set_title("decode throughput vs batch")
    ax2.legend()
    _save(fig, path)


def plot_kv_budget(r: dict, path: Path) -> None:
    fig, (ax1, ax2) = _fig(2, width=4.2)
    names = ["contiguous\n(static)", "paged\n(continuous)"]
    colors = [COLORS["static"], COLORS["continuous"]]
    ax1.bar(names, [r["static"]["max_concurrent"], r["continuous"]["max_concurrent"]], color=colors)
    ax1.set_ylabel("max concurrent sequences")
    ax1.set_title(f"{r['budget_tokens']:,}-token KV budget (simulator)")
    ax2.bar(names, [100 * r["static"]["kv_waste"], 100 * r["continuous"]["kv_waste"]], color=colors)
    ax2.set_ylabel("KV reserved but empty (%)")
    ax2.set_title("KV waste")
    _save(fig, path)


def plot_peers(r: dict, path: Path) -> None:
    fig, ax = _fig(1, width=7.5)
    names = list(r["runs"])
    palette = {"minillm static": COLORS["static"], "minillm continuous": COLORS["continuous"],
               "minillm chunked": COLORS["chunked"]}
    colors = [palette.get(n, COLORS["waiting"] if "transformers" in n else COLORS["preempt"])
              for n in names]
    for i, name in enumerate(names):
        values = [run["tokens_per_s"] for run in r["runs"][name]]
        ax.barh(i, np.median(values), color=colors[i], alpha=0.85)
        ax.scatter(values, [i] * len(values), color=COLORS["text"], s=12, zorder=3)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("useful generated tokens / s (bars: median, dots: rounds)")
    ax.set_title(f"{r['workload']['num_requests']} chat prompts, {r['workload']['max_num_seqs']} "
                 f"concurrent, {r['workload']['dtype']}, {r['workload']['threads']} threads")
    _save(fig, path)


def plot_prefix_caching(r: dict, path: Path) -> None:
    fig, (ax1, ax2) = _fig(2, width=4.2)
    names = list(r["runs"])
    colors = [COLORS["static"], COLORS["continuous"]]
    _bars_with_rounds(ax1, names, r["runs"], "prefill_tokens_computed", colors)
    ax1.set_ylabel("prompt tokens computed")
    ax1.set_title(f"hit rate {r['medians']['prefix cache']['hit_rate']:.0%}")
    runs_ms = {n: [{"ttft": 1000 * x["ttft_p50"]} for x in rs] for n, rs in r["runs"].items()}
    _bars_with_rounds(ax2, names, runs_ms, "ttft", colors)
    ax2.set_ylabel("TTFT P50 (ms)")
    ax2.set_title("time to first token")
    _save(fig, path)


def plot_speculative(r: dict, path: Path) -> None:
    fig, ax = _fig(1, width=7.5)
    names = list(r["runs"])
    colors = [COLORS["continuous"] if n.endswith("plain") else COLORS["chunked"] for n in names]
    _bars_with_rounds(ax, names, r["runs"], "generated_tokens_per_s", colors)
    ax.set_ylabel("generated tokens / s")
    ax.set_title("prompt-lookup speculation (bars: median, dots: rounds)")
    _save(fig, path)


PLOTS = {"throughput": plot_throughput, "chunked": plot_chunked, "step_time": plot_step_time,
         "kv_budget": plot_kv_budget, "peers": plot_peers,
         "prefix_caching": plot_prefix_caching, "speculative": plot_speculative}
