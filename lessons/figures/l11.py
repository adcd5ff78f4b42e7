"""Pictures of lesson 11: the numbers an interview answer uses, drawn.

* `plot_max_batch` — the memory wall: the largest batch against the context per sequence;
* `plot_roofline` — the decode roofline of a model on a GPU (data-sheet peaks);
* `plot_stutter` — inter-token gaps of running streams while a long prompt joins;
* `plot_goodput_sweep` — throughput and goodput against `max_num_seqs`.

The lesson computes every number; these functions only draw them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from minillm.widgets.style import COLORS


def plot_max_batch(contexts: np.ndarray, fp16: list[int], fp8: list[int]) -> None:
    """Max concurrent sequences against tokens per sequence, 16-bit vs 8-bit."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(contexts, fp16, "o-", color=COLORS["prefill"], label="weights and KV in fp16")
    ax.plot(contexts, fp8, "s--", color=COLORS["decode"], label="weights and KV in 8 bits")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(contexts, [f"{c:,}" for c in contexts])
    ax.set_yticks([8, 32, 128, 512], ["8", "32", "128", "512"])
    ax.set_ylim(3, 1000)
    for c, a, b in zip(contexts, fp16, fp8):
        ax.annotate(str(a), (c, a), textcoords="offset points", xytext=(0, -12), ha="center", fontsize=8)
        ax.annotate(str(b), (c, b), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xlabel("tokens per sequence")
    ax.set_ylabel("max concurrent sequences")
    ax.set_title("Llama-2-7B on one 80 GB GPU: the memory wall", loc="left")
    ax.legend()
    plt.show()


def plot_roofline(batch: np.ndarray, tokens_per_s: np.ndarray, ridge: float) -> None:
    """Upper bound on decode tokens/s against batch size, with the ridge point."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.loglog(batch, tokens_per_s, color=COLORS["continuous"], lw=2)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.text(ridge * 1.1, tokens_per_s.min() * 2, f"ridge ≈ {ridge:.0f}", fontsize=9)
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("upper bound: tokens/s")
    ax.set_title("7B decode on an H100: linear gain until compute-bound (roofline)", loc="left")
    plt.show()


def plot_stutter(runs: dict[str, np.ndarray], colours: dict[str, str], arrival: float) -> None:
    """`runs[label]` = token timestamps of one running stream; step lines of its gaps."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for label, t in runs.items():
        ax.hlines(np.diff(t) * 1e3, t[:-1], t[1:], color=colours[label], lw=3, label=label)
    ax.axvline(arrival, color="grey", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel(f"time (simulated s); the long prompt arrives at {arrival:g} s")
    ax.set_ylabel("wait for the next token (ms, log)")
    ax.set_title("The stutter, and chunked prefill spreading it (simulator; one stream shown)",
                 loc="left")
    ax.legend()
    plt.show()


def plot_goodput_sweep(sweep: np.ndarray) -> None:
    """`sweep` rows: (max_num_seqs, tokens/s, goodput fraction, ...)."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(sweep[:, 0], sweep[:, 1], "o-", color=COLORS["continuous"], label="throughput (tokens/s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("max_num_seqs")
    ax.set_ylabel("tokens/s")
    ax.set_xticks(sweep[:, 0], [str(int(v)) for v in sweep[:, 0]])
    ax2 = ax.twinx()
    ax2.plot(sweep[:, 0], sweep[:, 2] * 100, "s--", color=COLORS["static"], label="goodput (% within SLO)")
    ax2.set_ylabel("% of requests within SLO")
    ax2.grid(False)
    ax2.set_ylim(0, 100)
    ax.set_title("More concurrency: throughput keeps rising, goodput peaks (simulator)", loc="left")
    lines = ax.get_lines() + ax2.get_lines()
    ax.legend(lines, [line.get_label() for line in lines], loc="upper left")
    plt.show()


def plot_gain_by_workload(gains: dict[str, float]) -> None:
    """Bars: continuous ÷ static throughput, one bar per workload."""
    fig, ax = plt.subplots(figsize=(7, 2.8))
    names = list(gains)
    ax.barh(range(len(names)), [gains[n] for n in names], color=COLORS["continuous"])
    ax.axvline(1.0, color=COLORS["text"], lw=1)
    ax.set_yticks(range(len(names)), names, fontsize=9)
    ax.invert_yaxis()
    for y, n in enumerate(names):
        ax.text(gains[n], y, f" {gains[n]:.2f}×", va="center", fontsize=9)
    ax.set_xlabel("throughput of continuous ÷ static batching (same slots, simulator)")
    ax.set_title("One engine, one model: the multiplier is a property of the workload", loc="left")
    plt.show()
