"""Charts of lesson 02 (static batching): the straggler curve, the two workload presets,
and head-of-line blocking under Poisson load.

Every number drawn comes from the notebook (its arithmetic or its simulator Traces);
this module only draws them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from minillm.sim.metrics import summarize
from minillm.widgets.style import COLORS


def plot_straggler_curve(tails, idle_by_tail, marked: int = 700):
    """Idle share of one 8-slot batch against the length of its longest request."""
    fig, ax = plt.subplots(figsize=(6.5, 3.3))
    ax.plot(tails, 100 * np.asarray(idle_by_tail), color=COLORS["static"])
    ax.axvline(marked, color="#999999", ls=":")
    ax.text(marked + 10, 5, "the seed example", fontsize=8, color="#666666")
    ax.set_xlabel("length of the longest request (tokens); the other seven: 30 … 100")
    ax.set_ylabel("idle slot-iterations (%)")
    ax.set_ylim(0, 100)
    ax.set_title("One straggler sets the waste of the whole batch")
    plt.show()


def plot_presets(preset_lengths: dict, idle_share: dict):
    """Left: output-length histograms of the presets. Right: idle slot-time per policy.

    `idle_share[(preset, policy)]` is a fraction of slot-seconds that ran nothing."""
    names = list(preset_lengths)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    bins = np.logspace(0, np.log10(1024), 30)
    for name, color in zip(names, (COLORS["static"], COLORS["prefill"])):
        ax1.hist(preset_lengths[name], bins=bins, alpha=0.7, color=color, label=name)
    ax1.set_xscale("log")
    ax1.set_xlabel("output length (tokens)")
    ax1.set_ylabel("requests")
    ax1.set_title("Output lengths of the two presets")
    ax1.legend()
    x = np.arange(len(names))
    for k, policy in enumerate(("static", "continuous")):
        values = [100 * idle_share[name, policy] for name in names]
        ax2.bar(x + (k - 0.5) * 0.38, values, 0.38, color=COLORS[policy], label=policy)
    ax2.set_xticks(x, names)
    ax2.set_ylabel("idle slot-time (%)")
    ax2.set_ylim(0, 100)
    ax2.set_title("Slot waste weighted by step time (simulator)")
    ax2.legend()
    plt.show()


def plot_head_of_line(traces: dict, rates, at_rate: float):
    """Left: TTFT P99 against arrival rate. Right: the TTFT distribution at `at_rate`.

    `traces[(rate, policy)]` are simulator Traces of the same Poisson workload."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for policy in ("static", "continuous"):
        p99 = [summarize(traces[r, policy])["ttft_p99"] for r in rates]
        ax1.plot(rates, p99, "o-", color=COLORS[policy], label=policy)
        requests = traces[at_rate, policy].requests.values()
        ttft = np.sort([r.first_token_time - r.arrival_time for r in requests])
        ax2.plot(ttft, np.arange(1, len(ttft) + 1) / len(ttft), color=COLORS[policy], label=policy)
    ax1.set_yscale("log")
    ax1.set_xlabel("arrival rate (requests / simulated s)")
    ax1.set_ylabel("TTFT P99 (simulated s)")
    ax1.set_title("Tail time-to-first-token vs load")
    ax1.legend()
    ax2.set_xscale("log")
    ax2.set_xlabel("TTFT (simulated s)")
    ax2.set_ylabel("fraction of requests")
    ax2.set_title(f"TTFT distribution at {at_rate:g} request/s")
    ax2.axhline(0.99, color="#999999", ls=":", lw=1)
    ax2.legend()
    plt.show()
