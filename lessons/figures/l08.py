"""Pictures of lesson 08 (benchmarking and tuning).

* `fmt_time`, `plain_log_ticks` — one readable unit for a latency; plain labels on log axes;
* `plot_length_histograms` — prompt and output length distributions of the presets;
* `plot_arrivals` — cumulative Poisson arrivals vs a burst, and the gaps' distribution;
* `draw_timeline` — one row per request of a Trace: queued, prefilling, streaming;
* `plot_calibration` — the cost model's predicted step times against the measured ones;
* `plot_seqs_sweep` — TPOT P50/P99 against throughput as `max_num_seqs` grows;
* `plot_rate_sweep` — P99 TTFT and SLO attainment against offered load;
* `plot_budget_sweep` — worst token gap against P99 TTFT as the token budget changes;
* `plot_equal_vs_varied` — static vs continuous throughput on equal and varied lengths.

The lesson computes every number; these functions only draw them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from minillm.widgets.style import COLORS


def fmt_time(seconds: float) -> str:
    """A latency in one readable unit: 37 ms, 1.97 s, 40,400 s."""
    if seconds >= 100:
        return f"{seconds:,.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{1e3 * seconds:.0f} ms" if seconds >= 0.01 else f"{1e3 * seconds:.2f} ms"


def plain_log_ticks(axis) -> None:
    """Label a log axis 50, 100, 200 ... instead of 5x10^1 (and hide minor labels)."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


PRESET_COLORS = {"sharegpt_like": COLORS["prefill"], "chat": COLORS["static"],
                 "classification": COLORS["decode"]}


def plot_length_histograms(samples: dict[tuple[str, str], np.ndarray]) -> None:
    """samples[(preset, "prompt" | "output")] = lengths drawn from that preset."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), sharey=True)
    bins = np.logspace(0, np.log10(2048), 40)
    for ax, part in zip(axes, ("prompt", "output")):
        for (name, p), x in samples.items():
            if p == part:
                ax.hist(x, bins=bins, histtype="step", lw=1.8, color=PRESET_COLORS.get(name), label=name)
        n = len(next(iter(samples.values())))
        ax.set(xscale="log", xlabel=f"{part} length (tokens, log scale)", title=f"{part} lengths, {n} draws")
    axes[0].set_ylabel("requests")
    axes[1].legend()
    plt.show()


def plot_arrivals(arrivals: dict[float, np.ndarray], burst_size: int) -> None:
    """arrivals[rate] = arrival times of a Poisson workload at that rate (requests/s)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for (rate, t), color in zip(arrivals.items(), (COLORS["decode"], COLORS["prefill"])):
        gaps = np.diff(t)
        axes[0].step(t, np.arange(1, len(t) + 1), where="post", color=color, label=f"Poisson, {rate}/s")
        axes[1].hist(gaps, bins=30, density=True, histtype="step", lw=1.8, color=color,
                     label=f"gaps at {rate}/s: mean {gaps.mean():.2f} s (1/rate = {1 / rate:.2f})")
        g = np.linspace(0, gaps.max(), 100)
        axes[1].plot(g, rate * np.exp(-rate * g), ":", color=color)
    axes[0].axvline(0, color=COLORS["static"], lw=3, label=f"burst: all {burst_size} at t = 0")
    axes[0].set(xlabel="time (s)", ylabel="requests arrived", title="cumulative arrivals")
    axes[1].set(xlabel="gap between arrivals (s)", ylabel="density", title="gaps (dotted: exponential pdf)")
    axes[0].legend()
    axes[1].legend()
    plt.show()


def draw_timeline(trace, title: str) -> None:
    """One row per request: queued (purple), prefilling (blue), streaming tokens (green ticks)."""
    reqs = sorted(trace.requests.values(), key=lambda r: (r.arrival_time, r.request_id))
    t0 = min(r.arrival_time for r in reqs)
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(reqs) + 1.2))
    for row, r in enumerate(reqs):
        a, s, f, e = (x - t0 for x in (r.arrival_time, r.first_scheduled_time, r.first_token_time, r.finish_time))
        ax.barh(row, s - a, left=a, color=COLORS["waiting"], height=0.5)
        ax.barh(row, f - s, left=s, color=COLORS["prefill"], height=0.5)
        ax.barh(row, e - f, left=f, color=COLORS["decode"], height=0.5, alpha=0.35)
        ax.vlines(np.array(r.token_times) - t0, row - 0.25, row + 0.25, color=COLORS["decode"], lw=1)
    r = reqs[-1]                                         # annotate the last row's TTFT and E2E
    for x1, label, y in ((r.first_token_time, "TTFT", len(reqs) - 0.55), (r.finish_time, "E2E", len(reqs) - 0.05)):
        ax.annotate("", xy=(x1 - t0, y), xytext=(r.arrival_time - t0, y),
                    arrowprops=dict(arrowstyle="<->", color=COLORS["text"], lw=0.8))
        ax.text(x1 - t0, y, f" {label} {fmt_time(x1 - r.arrival_time)}", fontsize=8, va="center")
    ax.set_yticks(range(len(reqs)), [f"{q.prompt_len}→{q.output_len}" for q in reqs])
    ax.set(xlabel="seconds since the first arrival", ylabel="prompt→output tokens", title=title,
           ylim=(-0.6, len(reqs) + 0.25))
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in ("waiting", "prefill", "decode")]
    ax.legend(handles, ["queued", "prefill (maybe in chunks)", "decoding: one tick per token"],
              loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8)
    plt.show()


def plot_calibration(measured: np.ndarray, predicted: np.ndarray, has_prefill: np.ndarray) -> None:
    """Every step of the real run: cost-model prediction against measured time (ms)."""
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(1e3 * measured[has_prefill], 1e3 * predicted[has_prefill], color=COLORS["prefill"],
               label="steps with prefill tokens")
    ax.scatter(1e3 * measured[~has_prefill], 1e3 * predicted[~has_prefill], color=COLORS["decode"],
               label="decode-only steps")
    lim = [0, 1e3 * max(measured.max(), predicted.max()) * 1.05]
    ax.plot(lim, lim, "--", color=COLORS["text"], lw=1, label="predicted = measured")
    ax.set(xlim=lim, ylim=lim, xlabel="measured step time (ms)", ylabel="cost model (ms)",
           title="calibration: every step of the real run")
    ax.legend(fontsize=8)
    plt.show()


def plot_seqs_sweep(seqs: list[int], runs: dict[int, dict], tpot_slo: float, n: int) -> None:
    """TPOT P50/P99 against generated tokens/s, one point per max_num_seqs."""
    thr = [runs[s]["generated_tokens_per_s"] for s in seqs]
    fig, ax = plt.subplots(figsize=(7, 4))
    for q, style in ((50, "o-"), (99, "s--")):
        ax.plot(thr, [1e3 * runs[s][f"tpot_p{q}"] for s in seqs], style, color=COLORS["prefill"], label=f"TPOT P{q}")
    for s, x in zip(seqs, thr):
        ax.annotate(str(s), (x, 1e3 * runs[s]["tpot_p99"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axhline(1e3 * tpot_slo, color=COLORS["static"], lw=1, ls=":", label="TPOT SLO")
    ax.set(yscale="log", xlabel="throughput (generated tokens/s)", ylabel="TPOT (ms, log)",
           title=f"simulated, calibrated: {n} ShareGPT-like requests in a burst\n(labels: max_num_seqs)")
    plain_log_ticks(ax.yaxis)
    ax.legend()
    plt.show()


def plot_rate_sweep(rates: list[float], curves: dict[int, tuple[list[float], list[float]]],
                    ttft_slo: float, n: int) -> None:
    """curves[max_num_seqs] = (P99 TTFT per rate, share of requests within the SLO per rate)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for (s, (ttft, attained)), color in zip(curves.items(), (COLORS["static"], COLORS["prefill"], COLORS["decode"])):
        axes[0].plot(rates, ttft, "o-", color=color, label=f"max_num_seqs {s}")
        axes[1].plot(rates, [100 * a for a in attained], "o-", color=color, label=f"max_num_seqs {s}")
    axes[0].axhline(ttft_slo, color=COLORS["text"], ls=":", lw=1, label="TTFT SLO")
    axes[0].set_yscale("log")
    plain_log_ticks(axes[0].yaxis)
    axes[0].set(xlabel="offered load (requests/s)", ylabel="P99 TTFT (s, log)", title="queueing: P99 TTFT")
    axes[1].set(xlabel="offered load (requests/s)", ylabel="% of requests meeting the SLO", ylim=(-3, 103),
                title="SLO attainment (TTFT and TPOT)")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"simulated, calibrated: {n} ShareGPT-like requests, Poisson arrivals", fontsize=10)
    plt.show()


def plot_budget_sweep(budgets: list[int], runs: dict[int, dict], knee: int, rate: float) -> None:
    """Worst token gap (x) against P99 TTFT (y), one point per token budget."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    xs = [1e3 * runs[b]["itl_max"] for b in budgets]
    ys = [runs[b]["ttft_p99"] for b in budgets]
    ax.plot(xs, ys, "o-", color=COLORS["chunked"])
    for b, x, y in zip(budgets, xs, ys):
        ax.annotate(f"{b}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set(xlabel="worst gap between two tokens of any stream (ms, log)", ylabel="P99 TTFT (s)",
           title=f"simulated, calibrated: token budget (labels) with chunked prefill, {knee} slots\n"
                 f"Poisson at {rate:.3g} requests/s")
    plt.show()


def plot_equal_vs_varied(names: list[str], runs: dict[tuple[str, str], dict], slots: int) -> None:
    """Generated tokens/s of static and continuous batching on each workload."""
    fig, ax = plt.subplots(figsize=(7, 3.0))
    for i, name in enumerate(names):
        for j, sched in enumerate(("static", "continuous")):
            v = runs[name, sched]["generated_tokens_per_s"]
            ax.barh(i + 0.2 * (1 - 2 * j), v, height=0.38, color=COLORS[sched], label=sched if i == 0 else None)
            ax.text(v, i + 0.2 * (1 - 2 * j), f" {v:.3g}", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), names)
    ax.set(xlabel="generated tokens/s", title=f"simulated, calibrated: same total work, {slots} slots, burst")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    plt.show()


def print_equal_vs_varied(names: list[str], runs: dict[tuple[str, str], dict]) -> None:
    """One line per workload: continuous / static throughput and P99 E2E, and slot use."""
    for name in names:
        s, c = runs[name, "static"], runs[name, "continuous"]
        print(f"{name:<28} continuous / static: throughput "
              f"{c['generated_tokens_per_s'] / s['generated_tokens_per_s']:.2f}x, "
              f"P99 E2E {c['e2e_p99'] / s['e2e_p99']:.2f}x; slots busy: "
              f"static {100 * s['slot_utilization']:.0f}%, continuous {100 * c['slot_utilization']:.0f}%")
