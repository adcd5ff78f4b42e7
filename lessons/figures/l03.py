"""Pictures of lesson 03 (iteration-level scheduling): the scheduler loop, the latency
distribution of the real run, and the length-spread sweep of the simulator.

Every number drawn comes from the notebook (its Traces and its sweep); this module only
draws them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from minillm.sim.metrics import percentiles, request_metrics
from minillm.widgets.style import COLORS


def _box(ax, x, y, text, colour):
    ax.text(x, y, text, ha="center", va="center", fontsize=9, color="white",
            bbox=dict(boxstyle="round,pad=0.5", fc=colour, ec="none"))


def _arrow(ax, a, b, style="arc3"):
    ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="-|>", lw=1.5,
                color=COLORS["text"], connectionstyle=style))


def draw_loop():
    """Queue → schedule → one forward pass → update, and back to schedule every iteration."""
    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    _box(ax, 1.5, 3.6, "waiting queue", COLORS["waiting"])
    _box(ax, 4.9, 3.6, "schedule(now)\nwho runs, how many tokens", COLORS["text"])
    _box(ax, 8.9, 3.6, "one forward pass\nprefill + decode tokens", COLORS["prefill"])
    _box(ax, 8.9, 1.0, "update: append tokens;\nEOS / max_tokens → finish,\n"
         "free its slot + KV blocks", COLORS["decode"])
    _arrow(ax, (0.1, 2.5), (0.9, 3.25))
    ax.text(0.1, 2.25, "new requests", fontsize=9, color=COLORS["waiting"])
    _arrow(ax, (2.45, 3.6), (3.3, 3.6))
    _arrow(ax, (6.5, 3.6), (7.55, 3.6))
    ax.text(7.0, 4.25, "every iteration", fontsize=8, ha="center", style="italic")
    _arrow(ax, (8.9, 3.05), (8.9, 1.75))
    _arrow(ax, (6.95, 1.0), (4.9, 3.0), "angle,angleA=0,angleB=90,rad=0")
    ax.text(5.05, 1.6, "next iteration:\nfreed slots are refilled", fontsize=8, style="italic")
    _arrow(ax, (10.65, 1.0), (11.3, 1.0))
    ax.text(11.35, 1.0, "finished\nrequests\nreturn", fontsize=9, va="center",
            color=COLORS["decode"])
    ax.set_xlim(0, 12.4)
    ax.set_ylim(0, 4.6)
    ax.axis("off")
    ax.set_title("Iteration-level scheduling: the scheduler runs before every forward pass",
                 loc="left")
    plt.show()


def plot_latency_cdf(traces: dict, title: str):
    """End-to-end latency distribution of each Trace (all requests arrive at t = 0)."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for mode, trace in traces.items():
        e2e = np.sort(request_metrics(trace)["e2e"])                 # seconds, one per request
        p = percentiles(e2e)
        ax.step(e2e, np.arange(1, len(e2e) + 1) / len(e2e), where="post", color=COLORS[mode],
                lw=2, label=f"{mode}: P50 {p[50]:.1f} s, P99 {p[99]:.1f} s")
    ax.set_xlabel("end-to-end latency (s, all requests arrive at t = 0)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(title, loc="left")
    ax.legend(loc="lower right")
    plt.show()


def plot_spread_sweep(sigmas, rows, title: str):
    """Left: step and throughput ratios vs length spread. Right: slot utilisation.

    `rows[i, j]` = (sigma, steps static/continuous, throughput continuous/static,
    utilisation static, utilisation continuous) for sigma i and seed j."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    for col, label, colour in [(1, "iterations: static / continuous", COLORS["text"]),
                               (2, "simulated throughput: continuous / static", COLORS["continuous"])]:
        values = rows[:, :, col]
        ax1.plot(sigmas, values.mean(1), "o-", color=colour, label=label)
        ax1.fill_between(sigmas, values.min(1), values.max(1), color=colour, alpha=0.15)
    ax1.axhline(1, color="grey", lw=0.8)
    ax1.set_xlabel("spread of output lengths (lognormal σ)")
    ax1.set_ylabel("ratio")
    ax1.set_title("The gain appears only when lengths vary", loc="left")
    ax1.legend(loc="upper left")
    for col, mode in [(3, "static"), (4, "continuous")]:
        ax2.plot(sigmas, rows[:, :, col].mean(1), "o-", color=COLORS[mode], label=mode)
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("spread of output lengths (lognormal σ)")
    ax2.set_ylabel("slot utilisation")
    ax2.set_title("Busy slot-steps / all slot-steps", loc="left")
    ax2.legend()
    fig.suptitle(title, x=0.01, ha="left")
    plt.tight_layout()
    plt.show()
