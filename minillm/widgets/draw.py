"""The course's two recurring pictures, drawn once for the widgets and the lessons.

* **Slot grid** — one row per batch slot, one column per engine step (`layout.slot_layout`):
  prefill blue, decode green, a finished row still holding its slot pale red, a row in
  the batch that runs nothing this step grey, an empty slot light grey. A thin white
  tick marks where one request hands its slot to the next.
* **Block map** — the KV cache after one step (`layout.block_map`), one cell per block:
  the owner's colour over the share of the block's slots that hold a token, pale red
  over the rest of an owned block, light grey if free, an orange outline on blocks a
  preemption just took back. `draw_usage` adds the run's timeline of blocks in use vs
  tokens held; `draw_block_tables` is the small logical → physical diagram.
"""

from __future__ import annotations

import math

import numpy as np

from minillm.kv_cache import cdiv
from minillm.widgets.layout import (DECODE, EMPTY, FREE, HELD, IDLE, PREFILL, BlockMap,
                                    slot_layout, slot_numbers)
from minillm.widgets.style import COLORS

STATE_COLORS = (COLORS["free"], COLORS["prefill"], COLORS["decode"], COLORS["idle"], "#B8B8B8")
STATE_LABELS = {PREFILL: "prefill", DECODE: "decode (1 token)",
                IDLE: "idle (finished, still holding the slot)",
                HELD: "in the batch, no work this step", EMPTY: "empty (nothing to run)"}
OWNER_COLORS = ("#4C72B0", "#55A868", "#8172B3", "#64B5CD", "#937860", "#DA8BC3",
                "#2F4B7C", "#3D8C6E", "#B07AA1", "#4E9A9A", "#7A6A3A", "#5D7FD6")


def draw_slot_grid(ax, trace, cursor: int | None = None) -> np.ndarray:
    """The slot grid of a Trace on `ax`; returns its states [num_slots, num_steps]."""
    from matplotlib.colors import to_rgb
    states, owners = slot_layout(trace)
    slots, steps = states.shape
    table = np.array([to_rgb(c) for c in STATE_COLORS])                   # [5, 3]
    ax.imshow(table[states], aspect="auto", interpolation="nearest",    # [slots, steps, 3]
              extent=(-0.5, steps - 0.5, slots - 0.5, -0.5))
    # hand-overs: the owner changes between two occupied neighbouring steps
    change = (owners[:, 1:] != owners[:, :-1]) & (owners[:, 1:] >= 0) & (owners[:, :-1] >= 0)
    slot_idx, step_idx = np.nonzero(change)
    ax.vlines(step_idx + 0.5, slot_idx - 0.45, slot_idx + 0.45, colors="white", linewidth=1.2)
    ax.set_xlim(-0.5, max(steps, 1) - 0.5)
    ax.set_xlabel("engine step")
    ax.set_ylabel("batch slot")
    ax.set_yticks(range(0, slots, max(1, math.ceil(slots / 8))))
    ax.grid(False)
    if cursor is not None:
        ax.axvline(cursor, color=COLORS["text"], lw=1.5)
    return states


def slot_legend(fig, **kwargs):
    """The slot grid's colour legend on `fig`."""
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=STATE_COLORS[s], edgecolor="#999999", label=label)
               for s, label in STATE_LABELS.items()]
    return fig.legend(handles=handles, **kwargs)


def draw_slot_grids(traces: dict, title: str | None = None):
    """A figure with one slot grid per Trace, stacked, sharing the step axis.

    Each panel's title gives the share of slot-steps that ran nothing (see
    `layout.slot_numbers`). Returns the figure.
    """
    import matplotlib.pyplot as plt

    heights = [0.8 + min(0.17 * max(max(s.num_slots for s in t.steps), 1), 2.8)
               for t in traces.values()]
    fig, axes = plt.subplots(len(traces), 1, sharex=True, squeeze=False,
                             figsize=(9.5, 1.0 + sum(heights)),
                             gridspec_kw={"height_ratios": heights})
    width = max([len(t.steps) for t in traces.values()] + [1])
    for ax, (name, trace) in zip(axes[:, 0], traces.items()):
        draw_slot_grid(ax, trace)
        ax.set_xlabel("")
        ax.set_ylabel("slot")
        ax.set_xlim(-0.5, width - 0.5)
        n = slot_numbers(trace)
        ax.set_title(f"{name}: {n['iterations']} iterations, {n['idle_fraction']:.1%} idle "
                     f"({n['held_idle_fraction']:.1%} held by finished rows, "
                     f"{n['empty_fraction']:.1%} empty)", loc="left")
    axes[-1, 0].set_xlabel("iteration (engine step)")
    slot_legend(fig, loc="upper center", ncol=5, bbox_to_anchor=(0.5, 1.0), fontsize=8,
                columnspacing=1.0, handlelength=1.2)
    if title:
        fig.suptitle(title, y=1.05)
    top = 1 - 0.55 / fig.get_figheight()          # room for the legend (tight_layout is slow)
    fig.subplots_adjust(left=0.06, right=0.99, top=top, bottom=0.5 / fig.get_figheight() + 0.02,
                        hspace=0.9 / fig.get_figheight() * len(traces))
    return fig


def grid_shape(num_blocks: int) -> tuple[int, int]:
    """(columns, pixels per cell) of a block map of `num_blocks` cells."""
    cols = int(min(48, max(8, math.ceil(math.sqrt(2 * num_blocks)))))
    return cols, 12 if cols <= 24 else 8


def block_image(owners: np.ndarray, tokens: np.ndarray, block_size: int, cols: int, px: int,
                lost: np.ndarray | None = None) -> np.ndarray:
    """One step's map as an RGB image [rows*px, cols*px, 3] (`owners`, `tokens`: [num_blocks]).

    Each block is a px × px cell: the owner's colour over the filled share (from the
    left), pale red over the rest of an owned block, light grey if free; white grid
    lines when the cells are big enough; `lost` (bool [num_blocks]) outlines blocks in
    the preemption colour.
    """
    from matplotlib.colors import to_rgb
    n = len(owners)
    rows = cdiv(n, cols)
    palette = np.array([to_rgb(c) for c in OWNER_COLORS])             # [P, 3]
    owner_rgb = np.ones((rows * cols, 3))                              # [cells, 3]
    owner_rgb[:n] = to_rgb(COLORS["free"])
    mine = owners >= 0
    owner_rgb[:n][mine] = palette[owners[mine] % len(palette)]
    empty_rgb = owner_rgb.copy()
    empty_rgb[:n][mine] = to_rgb(COLORS["idle"])
    filled = np.zeros(rows * cols)
    filled[:n] = np.where(mine, tokens / block_size, 0.0)
    columns = (np.arange(px) + 0.5) / px                               # [px] cell x-centres
    in_fill = columns[None, :] < filled[:, None]                       # [cells, px]
    cell = np.where(in_fill[:, None, :, None], owner_rgb[:, None, None, :],
                    empty_rgb[:, None, None, :])                        # [cells, 1, px, 3]
    cell = np.repeat(cell, px, axis=1)                                 # [cells, px, px, 3]
    if lost is not None and lost.any():
        edge = np.zeros((px, px), dtype=bool)
        edge[[0, -2], :] = edge[:, [0, -2]] = True
        cell[:n][lost] = np.where(edge[None, :, :, None], to_rgb(COLORS["preempt"]), cell[:n][lost])
    if px >= 3:                                                        # grid lines
        cell[:, px - 1, :, :] = 1.0
        cell[:, :, px - 1, :] = 1.0
    image = cell.reshape(rows, cols, px, px, 3).transpose(0, 2, 1, 3, 4)
    return image.reshape(rows * px, cols * px, 3)


def draw_map(ax, blocks: BlockMap, step: int, cols: int | None = None) -> None:
    """The block map of one step on `ax`."""
    default_cols, px = grid_shape(blocks.num_blocks)
    image = block_image(blocks.owners[step], blocks.tokens[step], blocks.block_size,
                        cols or default_cols, px, blocks.lost(step))
    ax.imshow(image, interpolation="nearest")
    ax.set_xticks([]), ax.set_yticks([]), ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)


def draw_usage(ax, blocks: BlockMap, t_max: float | None = None):
    """Blocks in use vs blocks' worth of tokens held, over the run; returns a cursor line.

    The gap between the two areas is memory that is owned but empty. Orange triangles
    mark steps with a preemption.
    """
    t = [s.end_time for s in blocks.trace.steps]
    used = (blocks.owners != FREE).sum(axis=1)                        # [steps]
    held = blocks.tokens.sum(axis=1) / blocks.block_size              # [steps]
    ax.fill_between(t, 0, used, step="post", color=COLORS["idle"], lw=0, label="blocks in use")
    ax.fill_between(t, 0, held, step="post", color=OWNER_COLORS[0], lw=0, alpha=0.8,
                    label="tokens held (in blocks)")
    ax.set_ylim(0, blocks.num_blocks * 1.08)
    ax.set_xlim(0, max(t_max or t[-1], 1e-9))
    for s in blocks.trace.steps:
        if s.preempted:
            ax.plot([s.end_time], [blocks.num_blocks * 1.03], marker="v", ms=5,
                    color=COLORS["preempt"], ls="none")
    ax.set_xlabel("time (s)", labelpad=1, fontsize=8)
    ax.set_ylabel("blocks", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 0.98), fontsize=7, ncol=2)
    return ax.axvline(t[0], color=COLORS["text"], lw=1.2)


def draw_block_tables(ax, tables: dict[str, tuple[list[int], int]], num_blocks: int,
                      block_size: int, cols: int = 8) -> None:
    """Logical blocks (left, with the block table) → where they live in the physical pool.

    `tables`: name → (block table, tokens stored). Each logical block is filled in
    proportion to the tokens it holds; the physical cell shows which sequence and
    which of its logical blocks lives there. Meant for small examples (a few
    sequences of a few blocks each).
    """
    from matplotlib.patches import Rectangle
    gx = len(max(tables.values(), key=lambda t: len(t[0]))[0]) * 1.15 + 4.5   # grid's left x
    rows = cdiv(num_blocks, cols)
    for b in range(num_blocks):                                   # the physical pool
        x, y = gx + (b % cols) * 1.1, -(b // cols) * 1.1
        ax.add_patch(Rectangle((x, y), 1, 1, fc=COLORS["free"], ec="white"))
        ax.text(x + 0.05, y + 0.95, str(b), fontsize=6, va="top", color="#888888")
    for k, (name, (table, num_tokens)) in enumerate(tables.items()):
        color = OWNER_COLORS[k % len(OWNER_COLORS)]
        y0 = -k * 1.6
        ax.text(-0.3, y0 + 0.5, name, ha="right", va="center", fontsize=9, color=color)
        ax.text(len(table) * 1.15 + 0.1, y0 + 0.5, f"→ {table}", va="center", fontsize=8,
                color=color)
        for j, block in enumerate(table):
            fill = min(block_size, max(0, num_tokens - j * block_size)) / block_size
            x = j * 1.15
            ax.add_patch(Rectangle((x, y0), 1, 1, fc=COLORS["idle"], ec="white"))
            ax.add_patch(Rectangle((x, y0), fill, 1, fc=color, ec="none"))
            ax.text(x + 0.5, y0 - 0.18, f"L{j}", ha="center", va="top", fontsize=7)
            px, py = gx + (block % cols) * 1.1, -(block // cols) * 1.1
            ax.add_patch(Rectangle((px, py), 1, 1, fc=color, ec="white"))
            ax.add_patch(Rectangle((px + fill, py), 1 - fill, 1, fc=COLORS["idle"], ec="none"))
            ax.text(px + 0.5, py + 0.45, f"{name[:6]}\nL{j}", ha="center", va="center",
                    fontsize=5.5, color="white")
    ax.text(0, 1.5, "block tables (logical blocks, in order)", fontsize=9, weight="bold")
    ax.text(gx, 1.5, f"physical KV blocks (block_size {block_size})", fontsize=9, weight="bold")
    ax.set_xlim(-2.5, gx + cols * 1.1 + 0.2)
    ax.set_ylim(min(-rows * 1.1, -len(tables) * 1.6) - 0.3, 2.1)
    ax.set_aspect("equal")
    ax.axis("off")
