"""Charts of lesson 05: contiguous vs paged block maps, block tables, the block-size
sweep, concurrency under a fixed KV budget, and the four corners of batching × memory.

The numbers come from the notebook (its real-model Traces or its simulator runs); this
module only draws them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from minillm.widgets.draw import draw_block_tables, draw_map, draw_usage
from minillm.widgets.style import COLORS


def plot_contiguous_vs_paged(runs: dict, util: dict):
    """Top: each run's block map a third of the way in. Bottom: KV memory in use over time."""
    t_max = max(run.trace.steps[-1].end_time for run in runs.values())
    fig, axes = plt.subplots(2, len(runs), figsize=(11, 5.6), gridspec_kw={"height_ratios": (1.3, 1)})
    for col, (name, run) in enumerate(runs.items()):
        mid = len(run.trace.steps) // 3
        draw_map(axes[0, col], run, mid)
        axes[0, col].set_title(f"{name}: the {run.num_blocks} blocks after step {mid} "
                               f"({run.trace.steps[mid].end_time:.1f} s)", loc="left")
        draw_usage(axes[1, col], run, t_max).set_visible(False)
        axes[1, col].set_title(f"{name}: {util[name]:.1%} of the memory in use holds tokens", loc="left")
    fig.suptitle("Same 8 requests, same pool, both continuous: pale red = owned but empty, "
                 "colour = a request's tokens", x=0.01, ha="left", fontsize=10)
    fig.tight_layout()
    plt.show()


def plot_block_tables(running, num_blocks: int, block_size: int):
    """The block tables of the running sequences, drawn over the physical pool of
    `num_blocks` blocks of `block_size` tokens."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    draw_block_tables(ax, {s.request_id: (s.block_table, s.num_computed_tokens) for s in running},
                      num_blocks, block_size)
    ax.set_title("Block tables map each sequence's logical blocks to physical blocks anywhere in the pool",
                 loc="left", fontsize=10)
    fig.tight_layout()
    plt.show()


def plot_block_growth(growth, block_size: int):
    """Tokens cached vs blocks held, step by step, for one sequence."""
    tokens, blocks = zip(*[(t, len(table)) for t, table in growth])
    fig, ax = plt.subplots(figsize=(11, 2.6))
    ax.step(range(len(tokens)), tokens, where="post", color=COLORS["decode"], label="tokens cached")
    ax.step(range(len(blocks)), np.array(blocks) * block_size, where="post", color=COLORS["prefill"],
            label=f"token slots of the blocks held (blocks × {block_size})")
    ax.set(xlabel="engine step", ylabel="tokens")
    ax.set_title(f"A new block every {block_size} tokens, not every token", loc="left")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    plt.show()


def plot_block_size_sweep(sweep):
    """Left: share of used slots holding tokens vs block size. Right: table entries per sequence."""
    bs, u, e, _ = map(np.array, zip(*sweep))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.4))
    a1.plot(bs, u * 100, "o-", color=COLORS["decode"])
    a1.set_xscale("log", base=2), a1.set_xlabel("block size (tokens)"), a1.set_ylim(0, 105)
    a1.set_ylabel("KV memory in use holding tokens (%)")
    a1.set_title("internal fragmentation grows with the block", loc="left")
    a2.plot(bs, e, "o-", color=COLORS["prefill"])
    a2.set_xscale("log", base=2), a2.set_yscale("log"), a2.set_xlabel("block size (tokens)")
    a2.set_ylabel("block-table entries per sequence")
    a2.set_title("…while the bookkeeping shrinks with it", loc="left")
    fig.tight_layout()
    plt.show()


def plot_capacity(budgets, capacity: dict):
    """Sequences running and simulated tokens/s against the KV budget, one line per variant."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.3))
    for variant, color in zip(capacity, (COLORS["static"], COLORS["continuous"])):
        res, tps = zip(*capacity[variant])
        a1.plot(budgets, res, "o-", color=color, label=variant)
        a2.plot(budgets, tps, "o-", color=color, label=variant)
    a1.set(xscale="log", xlabel="KV memory (token slots)", ylabel="sequences running (time-avg)")
    a2.set(xscale="log", xlabel="KV memory (token slots)", ylabel="simulated tokens / s")
    a1.legend(), a1.set_title("concurrency under a fixed KV budget", loc="left")
    a2.set_title("throughput (simulator)", loc="left")
    fig.tight_layout()
    plt.show()


def plot_four_corners(four: dict, num_blocks: int):
    """Blocks in use, sequences running and waiting over time, for each batching × memory variant."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 5), sharex=True, sharey=True)
    for ax, (v, trace) in zip(axes.flat, four.items()):
        t = [s.end_time for s in trace.steps]
        ax.fill_between(t, [s.kv_blocks_used / 4 for s in trace.steps], step="post", color=COLORS["idle"],
                        lw=0, label=f"KV blocks in use ÷ 4 (of {num_blocks})")
        ax.step(t, [len(s.scheduled) for s in trace.steps], where="post", color=COLORS["decode"],
                label="sequences running")
        ax.step(t, [s.num_waiting for s in trace.steps], where="post", color=COLORS["waiting"], lw=1,
                label="waiting")
        ax.set_title(f"{v}: done at {trace.steps[-1].end_time:.0f} s", loc="left")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    for ax in axes[1]:
        ax.set_xlabel("simulated time (s)")
    fig.tight_layout()
    plt.show()
