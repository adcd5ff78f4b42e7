"""Pictures of lesson 04 (selective batching).

* `draw_decoder_layer` — one Llama decoder layer as minillm runs it: every op except
  attention works on all `T` rows of the flat batch at once (one matmul per weight
  matrix); attention splits the rows by sequence, each reading only its own KV cache.
* `draw_flat_batch` — the flat batch's rows with their positions, slots and
  `query_start_loc` boundaries.
* `draw_block_mask` — the block-diagonal mask of "one big attention" over the flat batch.
* `plot_padding_cost` — (n − 1)(B − 1) padding rows, absolute and as a share.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from minillm.widgets.style import COLORS

SEQ_COLORS = [COLORS["prefill"], COLORS["decode"], COLORS["waiting"], COLORS["preempt"]]


def _rows_strip(ax, x, y, width, rows_per_seq, height=0.16):
    """A strip of T thin cells, coloured by the sequence each row belongs to."""
    total = sum(rows_per_seq)
    cell = width / total
    i = 0
    for s, n in enumerate(rows_per_seq):
        for _ in range(n):
            ax.add_patch(plt.Rectangle((x + i * cell, y), cell * 0.9, height,
                                       color=SEQ_COLORS[s % len(SEQ_COLORS)], lw=0))
            i += 1


def _op(ax, x, y, w, label, weights, rows_per_seq):
    ax.add_patch(plt.Rectangle((x, y), w, 1.0, facecolor="white", edgecolor=COLORS["text"], lw=1.2))
    ax.text(x + w / 2, y + 0.68, label, ha="center", va="center", fontsize=8.5)
    _rows_strip(ax, x + 0.12, y + 0.2, w - 0.24, rows_per_seq)
    ax.text(x + w / 2, y - 0.2, weights, ha="center", va="top", fontsize=7, color="#555555")


def _attention(ax, x, y, w, names, rows_per_seq, context_per_seq):
    ax.add_patch(plt.Rectangle((x, y - 0.35), w, 1.7, facecolor="#FFF4E5",
                               edgecolor=COLORS["preempt"], lw=1.6))
    ax.text(x + w / 2, y + 1.17, "attention, per sequence", ha="center", fontsize=8.5,
            weight="bold", color=COLORS["text"])
    lane = (w - 0.2) / len(names)
    for s, (name, n, ctx) in enumerate(zip(names, rows_per_seq, context_per_seq)):
        lx = x + 0.1 + s * lane
        color = SEQ_COLORS[s % len(SEQ_COLORS)]
        ax.add_patch(plt.Rectangle((lx + 0.04, y - 0.22), lane - 0.08, 1.22, facecolor="white",
                                   edgecolor=color, lw=1.4))
        ax.text(lx + lane / 2, y + 0.78, f"{name}: {n} quer{'y' if n == 1 else 'ies'}",
                ha="center", fontsize=7)
        _rows_strip(ax, lx + 0.15, y + 0.5, (lane - 0.3) * n / max(rows_per_seq), [0] * s + [n])
        ax.text(lx + lane / 2, y + 0.22, f"× its own {ctx}\ncached K/V", ha="center",
                va="center", fontsize=6.5, color=color)
    ax.text(x + w / 2, y - 0.55, "no weights: nothing to share across sequences",
            ha="center", va="top", fontsize=7, color="#555555")


def _arrow(ax, x0, x1, y):
    ax.annotate("", xy=(x1, y), xytext=(x0, y), arrowprops=dict(arrowstyle="->", lw=1))


def draw_decoder_layer(weights: dict[str, int], names=("A", "B", "C"), rows_per_seq=(6, 1, 5),
                       context_per_seq=(6, 6, 9)):
    """One decoder layer on a flat batch of sequences `names` with `rows_per_seq` new rows.

    weights: parameter count per op, keys "input_norm", "qkv_proj", "o_proj",
    "post_attention_norm", "gate_up_proj", "down_proj".
    """
    def w(key):
        n = weights[key]
        return f"{n / 1e6:.2f} M weights" if n >= 1e5 else f"{n:,} weights"

    rows = list(rows_per_seq)
    fig, ax = plt.subplots(figsize=(11.5, 4.4))
    top = [("RMSNorm", w("input_norm"), 1.3), ("QKV proj", w("qkv_proj"), 1.5),
           ("RoPE", "no weights\n(needs positions)", 1.3), (None, None, 3.9),
           ("O proj", w("o_proj"), 1.4), ("+ residual", "no weights", 1.3)]
    bottom = [("RMSNorm", w("post_attention_norm"), 1.3), ("gate/up proj", w("gate_up_proj"), 1.7),
              ("SiLU(gate)·up", "no weights", 1.6), ("down proj", w("down_proj"), 1.5),
              ("+ residual", "no weights", 1.3)]
    ax.text(-0.1, 3.2, f"in: flat batch\n[T = {sum(rows)}, H]", ha="right", va="center", fontsize=8)
    x = 0.1
    for label, text, width in top:
        if label is None:
            _attention(ax, x, 2.7, width, names, rows, context_per_seq)
        else:
            _op(ax, x, 2.7, width, label, text, rows)
        x += width + 0.35
        _arrow(ax, x - 0.35, x - 0.02, 3.2)
    ax.annotate("", xy=(0.1 + 0.65, 1.0), xytext=(x - 0.35, 3.2),
                arrowprops=dict(arrowstyle="->", lw=1, connectionstyle="angle,angleA=-90,angleB=180,rad=8"))
    x = 0.1
    for label, text, width in bottom:
        _op(ax, x, 0.0, width, label, text, rows)
        x += width + 0.35
        if label != bottom[-1][0] or x < 9:
            _arrow(ax, x - 0.35, x - 0.02, 0.5)
    ax.text(x, 0.5, f"out: [T = {sum(rows)}, H]\nto the next layer", va="center", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=SEQ_COLORS[s]) for s in range(len(names))]
    ax.legend(handles, [f"rows of {n}" for n in names], loc="lower right", ncol=len(names),
              fontsize=8, bbox_to_anchor=(1.0, -0.12))
    ax.set_xlim(-1.6, 13.2)
    ax.set_ylim(-0.9, 4.3)
    ax.axis("off")
    ax.set_title("One decoder layer under selective batching: white boxes are token-wise — one "
                 "matmul (or one elementwise op)\nover all T rows, whatever sequence they belong "
                 "to; only attention splits the rows by sequence", loc="left", fontsize=10)
    plt.show()


def draw_flat_batch(example, by_hand):
    """The flat rows of `example` [(name, tokens, computed, table)] with the metadata of
    `by_hand` (positions, slot_mapping, query_start_loc)."""
    fig, ax = plt.subplots(figsize=(9, 2.2))
    starts = by_hand["query_start_loc"]
    for b, (name, tokens, computed, table) in enumerate(example):
        for j, row in enumerate(range(starts[b], starts[b + 1])):
            ax.add_patch(plt.Rectangle((row, 0), 0.92, 1, color=SEQ_COLORS[b]))
            ax.text(row + 0.46, 0.5, f"{name}{computed + j}", ha="center", va="center",
                    color="white", fontsize=9)
            ax.text(row + 0.46, -0.35, str(by_hand["positions"][row]), ha="center", fontsize=9)
            ax.text(row + 0.46, -0.8, str(by_hand["slot_mapping"][row]), ha="center", fontsize=9)
    for s in starts:
        ax.plot([s - 0.04, s - 0.04], [-0.1, 1.45], color=COLORS["text"], lw=1.5)
        ax.text(s - 0.04, 1.6, str(s), ha="center", fontsize=9)
    for label, y in [("query_start_loc", 1.6), ("flat row", 0.5), ("positions", -0.35),
                     ("slot_mapping", -0.8)]:
        ax.text(-0.3, y, label, ha="right", va="center", fontsize=9, style="italic")
    ax.set_xlim(-3.2, starts[-1] + 0.3)
    ax.set_ylim(-1.2, 2.0)
    ax.axis("off")
    ax.set_title("One flat batch: A's prompt, B's decode, C's remaining chunk — no padding",
                 loc="left")
    plt.show()


def draw_block_mask(mask: np.ndarray, n_new, n_ctx, names=("A", "B", "C")):
    """The [queries, keys] mask of one attention over the whole flat batch."""
    fig, ax = plt.subplots(figsize=(6.5, 3))
    ax.imshow(mask, cmap=ListedColormap([COLORS["free"], COLORS["prefill"]]),
              interpolation="nearest", aspect="equal")
    ax.set_xlabel("keys: " + " | ".join(f"{n}'s {c}" for n, c in zip(names, n_ctx)))
    ax.set_ylabel("queries (flat rows)")
    ax.set_xticks(np.cumsum([0] + list(n_ctx))[:-1] - 0.5)
    ax.set_yticks(np.cumsum([0] + list(n_new))[:-1] - 0.5)
    ax.set_xticklabels(names)
    ax.set_yticklabels(names)
    ax.grid(False)
    ax.set_title(f"Block-diagonal mask: {mask.sum()} of {mask.size} entries allowed "
                 f"({mask.mean():.0%})", loc="left")
    plt.show()


def plot_padding_cost(max_n=512, batches=(4, 16, 64)):
    """(n − 1)(B − 1) padding rows of an n-token prompt joining B − 1 decodes."""
    n = np.arange(1, max_n + 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
    for B, colour in zip(batches, [COLORS["decode"], COLORS["prefill"], COLORS["static"]]):
        waste = (n - 1) * (B - 1)
        ax1.plot(n, waste, color=colour, label=f"B = {B}")
        ax2.plot(n, waste / (n * B), color=colour, label=f"B = {B}")
    ax1.set_xlabel("prompt length n (tokens)")
    ax1.set_ylabel("padding rows")
    ax1.set_title("(n − 1)(B − 1) padding rows", loc="left")
    ax1.legend()
    ax2.set_xlabel("prompt length n (tokens)")
    ax2.set_ylabel("share of the batch")
    ax2.set_ylim(0, 1)
    ax2.set_title("Padding / all rows of the [B, n] batch", loc="left")
    plt.tight_layout()
    plt.show()


def plot_attention_times(labels, per_sequence_ms, dense_ms, allowed_share):
    """Per-sequence (varlen-style) attention against one dense masked attention."""
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    y = np.arange(len(labels))
    ax.barh(y - 0.2, per_sequence_ms, 0.4, color=COLORS["decode"],
            label="per sequence (the torch backend)")
    ax.barh(y + 0.2, dense_ms, 0.4, color=COLORS["static"],
            label="one dense attention + block-diagonal mask")
    for i, share in enumerate(allowed_share):
        ax.text(max(per_sequence_ms[i], dense_ms[i]) * 1.02, i, f"{share:.1%} of scores allowed",
                va="center", fontsize=8)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms per layer (median of 5, this machine)")
    ax.set_xlim(0, 1.45 * max(max(per_sequence_ms), max(dense_ms)))
    ax.set_title("Ragged batch, one masked attention vs per-sequence attention", loc="left")
    ax.legend(loc="lower right", fontsize=8)
    plt.show()
