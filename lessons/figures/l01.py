"""Charts of lesson 01: decode step time against batch size, the roofline floor, and
the arithmetic intensity of a decode step against GPU ridge points.

The numbers come from the notebook (its measurements, or its `step_cost` arithmetic);
this module only draws them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from minillm.widgets.style import COLORS


def _batch_axis(ax, batches):
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])


def plot_step_time_and_throughput(batches, step_s, title: str):
    """Left: decode step time vs batch. Right: tokens/s vs batch, beside perfect scaling."""
    batches, step_s = list(batches), np.asarray(step_s)
    tokens_per_s = np.array(batches) / step_s
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(batches, 1000 * step_s, "o-", color=COLORS["decode"])
    ax1.set_ylabel("decode step time (ms, median of 5)")
    ax1.set_ylim(bottom=0)
    ax1.set_title("Decode step time vs batch")
    ax2.plot(batches, tokens_per_s, "o-", color=COLORS["decode"], label="measured")
    ax2.plot(batches, tokens_per_s[0] * np.array(batches), "--", color="#999999",
             label="perfect scaling (batch 1 × B)")
    ax2.set_ylim(0, 1.15 * tokens_per_s.max())
    ax2.set_ylabel("tokens per second")
    ax2.set_title("Decode throughput vs batch")
    ax2.legend()
    for ax in (ax1, ax2):
        _batch_axis(ax, batches)
        ax.set_xlabel("batch size (sequences per decode step)")
    fig.suptitle(title, y=1.02)
    plt.show()


def plot_roofline(batches, step_s, memory_floor, compute_floor):
    """Measured step times against the two floors (bytes / bandwidth, FLOPs / matmul rate)."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(batches, 1000 * np.asarray(step_s), "o-", color=COLORS["decode"], label="measured step")
    ax.plot(batches, 1000 * np.asarray(memory_floor), "--", color=COLORS["prefill"],
            label="memory floor: bytes / bandwidth")
    ax.plot(batches, 1000 * np.asarray(compute_floor), "--", color=COLORS["static"],
            label="compute floor: FLOPs / matmul rate")
    _batch_axis(ax, batches)
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("ms per decode step (log scale)")
    ax.set_title("Measured decode steps against the roofline floor")
    ax.legend()
    plt.show()


def plot_intensity(batches, curves, ridges):
    """Arithmetic intensity of a decode step vs batch.

    curves: [(label, [intensity per batch], colour, line style)];
    ridges: [(label, FLOP/byte, colour)] drawn as horizontal lines.
    """
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for label, values, color, ls in curves:
        ax.plot(batches, values, ls, marker="o", ms=3, color=color, label=label)
    for label, ridge, color in ridges:
        ax.axhline(ridge, color=color, lw=1, ls="--")
        ax.text(batches[0], ridge * 1.12, f"{label} ridge ({ridge:.0f})", fontsize=8, color=color)
    _batch_axis(ax, batches)
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("FLOPs per byte read")
    ax.set_title("Arithmetic intensity of one decode step")
    ax.legend(loc="lower right")
    plt.show()


def plot_achieved_bandwidth(batches, achieved, copy_bandwidth):
    """Bytes a step must read ÷ its measured time, against the copy bandwidth."""
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    ax.plot(batches, np.asarray(achieved) / 1e9, "o-", color=COLORS["decode"],
            label="achieved: bytes(B) / measured step")
    ax.axhline(copy_bandwidth / 1e9, color=COLORS["prefill"], ls="--",
               label="this machine's copy bandwidth")
    _batch_axis(ax, batches)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch size")
    ax.set_ylabel("GB/s")
    ax.set_title("How much of the memory bandwidth a decode step uses")
    ax.legend()
    plt.show()
