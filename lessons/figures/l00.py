"""Pictures of lesson 00: one request's prefill and decode steps, and the KV cache.

* `draw_prefill_then_decode` — the whole life of a request in one picture: the prompt
  goes through the model in ONE forward pass (prefill), which fills the KV cache and
  gives the first token; every later step feeds one token, reads the whole cache,
  adds one entry to it and gives one more token (decode).
* `plot_step_times`, `plot_prefill_vs_length`, `plot_kv_vs_weights` — the lesson's
  measurements as charts.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from minillm.widgets.style import COLORS

CELL = 0.8           # width of one token box in the picture (axis units)
FED = 1.3 * CELL     # width of a token fed in (room for its text)
GAP = 0.9            # space between two steps' columns


def _token(ax, x, y, text, color, width=CELL, edge="white", lw=0.8):
    ax.add_patch(plt.Rectangle((x, y), width * 0.94, 0.5, facecolor=color, edgecolor=edge, lw=lw))
    if text:
        ax.text(x + width * 0.47, y + 0.25, text, ha="center", va="center", fontsize=7,
                color="white")


def _arrow(ax, start, end, color=COLORS["text"], ls="-"):
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle="->", color=color, lw=1.1, ls=ls))


def _short(piece: str, limit: int = 7) -> str:
    piece = piece.replace("Ġ", "·").replace("Ċ", "↵")
    return piece if len(piece) <= limit else piece[:limit - 1] + "…"


def draw_prefill_then_decode(prompt_pieces: list[str], output_pieces: list[str]):
    """One request step by step: step 0 is the prefill, steps 1… are decodes.

    Columns are engine steps. In each column, bottom to top: the tokens this step feeds
    in, the forward pass, the KV cache after the step (prompt entries blue, generated
    entries green, the entry this step wrote outlined), and the token it produces, which
    the next step feeds in.
    """
    n, k = len(prompt_pieces), len(output_pieces)
    fig, ax = plt.subplots(figsize=(11, 4.6))
    widths = [max(CELL * (n + step), FED * (n if step == 0 else 1)) for step in range(k)]
    xs = np.concatenate([[0.0], np.cumsum(np.array(widths[:-1]) + GAP)])
    for step, (x0, w) in enumerate(zip(xs, widths)):
        decode, mid = step > 0, x0 + w / 2
        fed = [output_pieces[step - 1]] if decode else list(prompt_pieces)
        color = COLORS["decode"] if decode else COLORS["prefill"]
        for i, piece in enumerate(fed):                                   # the tokens fed in
            _token(ax, mid - len(fed) * FED / 2 + i * FED, 0.0, _short(piece, 8), color, width=FED)
        box_w = max(len(fed) * FED, 2.4)                                  # the forward pass
        ax.add_patch(plt.Rectangle((mid - box_w / 2, 0.95), box_w, 0.75, facecolor="white",
                                   edgecolor=color, lw=1.6))
        ax.text(mid, 1.32, f"forward ×1\n{len(fed)} token{'s' if len(fed) > 1 else ''}",
                ha="center", va="center", fontsize=8)
        _arrow(ax, (mid, 0.52), (mid, 0.93))
        held = n + step                                                   # cache after the step
        cx = mid - held * CELL / 2
        for i in range(held):                                             # the KV cache
            new = decode and i == held - 1
            _token(ax, cx + i * CELL, 2.15, "", COLORS["prefill"] if i < n else COLORS["decode"],
                   edge=COLORS["text"] if new else "white", lw=1.8 if new else 0.8)
        ax.text(cx, 2.78, f"KV cache: {held} tokens", ha="left", fontsize=8)
        _arrow(ax, (mid - 0.25, 1.72), (mid - 0.25, 2.13))               # writes K/V
        if decode:                                                        # reads all of it
            _arrow(ax, (cx + 0.2, 2.13), (mid - box_w / 2 + 0.1, 1.72), ls="--")
        _token(ax, mid + 0.6 - CELL * 0.8, 3.2, _short(output_pieces[step], 9), COLORS["decode"],
               width=CELL * 1.6)
        _arrow(ax, (mid + 0.6, 1.72), (mid + 0.6, 3.18), color=COLORS["decode"])
        ax.text(mid, -0.45, "step 0: prefill" if not decode else f"step {step}: decode",
                ha="center", fontsize=9, color=color, weight="bold")
        if step + 1 < k:                          # the output is the next step's input
            gx, nx = x0 + w + GAP / 2, xs[step + 1] + widths[step + 1] / 2 - FED / 2
            ax.plot([mid + 0.6 + CELL * 0.8, gx, gx], [3.45, 3.45, 0.25], color=COLORS["decode"],
                    lw=1, ls=":")
            _arrow(ax, (gx, 0.25), (nx, 0.25), color=COLORS["decode"])
    right = xs[-1] + widths[-1] + 0.25
    for y, text in [(3.45, "output token"), (2.4, "K/V of every\ntoken so far"),
                    (1.32, "the model"), (0.25, "tokens fed in")]:
        ax.text(right, y, text, fontsize=8, va="center")
    ax.set_xlim(-0.2, right + 1.5)
    ax.set_ylim(-0.7, 3.9)
    ax.axis("off")
    ax.set_title("One request: ONE forward over the whole prompt fills the KV cache and gives "
                 "the first token;\nthen one forward per token, which reads the whole cache "
                 "(dashed), adds one entry (outlined) and gives the next token", fontsize=10,
                 loc="left")
    plt.show()


def plot_step_times(step_ms: np.ndarray, prompt_len: int):
    """Bar per engine step of one request: step 0 prefill (blue), then decode (green)."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    colors = [COLORS["prefill"]] + [COLORS["decode"]] * (len(step_ms) - 1)
    ax.bar(range(len(step_ms)), step_ms, color=colors)
    ax.set_xlabel("engine step")
    ax.set_ylabel("step time (ms, median of 3 runs)")
    ax.set_title(f"One request, {prompt_len}-token prompt: step 0 is the prefill (blue), "
                 f"then one decode step per token (green)")
    plt.show()


def plot_prefill_vs_length(prefill_by_len: dict[int, float], decode_ms: float):
    """Prefill time against prompt length (log-2 axis), one decode step as a line."""
    lengths = list(prefill_by_len)
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.plot(lengths, [prefill_by_len[n] for n in lengths], "o-", color=COLORS["prefill"],
            label="prefill (one forward over the prompt)")
    ax.axhline(decode_ms, color=COLORS["decode"], ls="--", label="one decode step (one token)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("time (ms, median of 3)")
    ax.set_title("Prefill time vs prompt length on this machine")
    ax.legend()
    plt.show()


def plot_kv_vs_weights(max_context: int, kv_per_token: int, weight_bytes: int, dtype: str,
                       batches=(1, 8, 32)):
    """KV-cache bytes of a batch against context length, beside the weights' bytes."""
    context = np.arange(0, max_context + 1, 64)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for batch, shade in zip(batches, ["#9ecae1", "#4292c6", "#08519c"]):
        ax.plot(context, batch * context * kv_per_token / 2**30, color=shade,
                label=f"KV cache, batch {batch}")
    ax.axhline(weight_bytes / 2**30, color=COLORS["text"], ls="--", label="model weights")
    ax.set_xlabel("context length (tokens per sequence)")
    ax.set_ylabel("GiB")
    ax.set_title(f"KV cache size = batch × context × {kv_per_token / 1024:.0f} KiB ({dtype})")
    ax.legend()
    plt.show()
