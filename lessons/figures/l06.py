"""Charts of lesson 06: who runs when and every inter-token gap of a run, the tokens of
each step against the budget, and the budget sweep.

The numbers come from the notebook (its real-model Traces or its simulator runs); this
module only draws them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from minillm.widgets.chunked import draw_itl, draw_timeline
from minillm.widgets.style import COLORS


def show_run(trace, title: str, gap_axis_ms: float | None = None) -> None:
    """Left: the timeline (waiting / prefill / decode per request). Right: every inter-token gap."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw={"width_ratios": (1, 1.1)})
    draw_timeline(a1, trace)
    a1.set_title("who runs when (purple: waiting, blue: prefill, green: decode)", loc="left", fontsize=9)
    draw_itl(a2, trace)
    if gap_axis_ms:
        a2.set_ylim(0, gap_axis_ms)
    a2.set_title("every inter-token gap; dotted: a long prompt arrives", loc="left", fontsize=9)
    fig.suptitle(title, x=0.01, ha="left", fontsize=11, weight="bold")
    fig.tight_layout()
    plt.show()


def plot_step_tokens(trace, budget: int) -> None:
    """Decode and prefill tokens of every step, stacked, against the token budget."""
    fig, ax = plt.subplots(figsize=(11, 2.6))
    idx = [s.index for s in trace.steps]
    decode = [s.num_decode_tokens for s in trace.steps]
    ax.bar(idx, decode, width=1, color=COLORS["decode"], label="decode tokens")
    ax.bar(idx, [s.num_prefill_tokens for s in trace.steps], width=1, bottom=decode,
           color=COLORS["prefill"], label="prefill tokens (chunks)")
    ax.axhline(budget, color=COLORS["static"], ls="--", lw=1, label=f"token budget {budget}")
    ax.set(xlabel="engine step", ylabel="tokens in the step")
    ax.set_title("Decodes first, the prompt fills the rest of the budget", loc="left")
    ax.legend(ncol=3, loc="lower right", bbox_to_anchor=(1, 1.0))
    ax.set_ylim(0, budget * 1.1)
    fig.tight_layout()
    plt.show()


def plot_budget_sweep(budgets, results: dict, baseline: dict, source: str) -> None:
    """Left: P99 ITL and longest gap vs budget. Right: P50 TTFT and the long prompts' TTFT."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.5))
    for ax, rows, unit in ((a1, (("itl_p99", "P99 ITL", "o-", "--"), ("itl_max", "longest gap", "s:", ":")), 1000),
                           (a2, (("ttft_p50", "P50 TTFT", "o-", "--"),
                                 ("long_ttft_mean", "long prompts' TTFT", "s-", ":")), 1)):
        for (key, label, style, base_style), color in zip(rows, (COLORS["chunked"], COLORS["waiting"])):
            ax.plot(budgets, [results[b][key] * unit for b in budgets], style, color=color,
                    label=f"{label}, chunked")
            ax.axhline(baseline[key] * unit, color=COLORS["static"], ls=base_style,
                       label=f"{label}, no chunking")
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xlabel("token budget per step")
        ax.legend(fontsize=7)
    a1.set(yscale="log", ylabel="ms")
    a1.set_title("streams: the budget bounds the worst step", loc="left")
    a2.set_ylabel("seconds")
    a2.set_title("first tokens: the price of small budgets", loc="left")
    fig.suptitle(f"Budget sweep, simulator ({source})", x=0.01, ha="left", fontsize=11, weight="bold")
    fig.tight_layout()
    plt.show()
