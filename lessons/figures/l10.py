"""Pictures of lesson 10 (prefix caching, speculative decoding, CUDA graphs, beyond one GPU).

* `draw_prefix_hashes` — prompts cut into blocks, each full block's chained hash, and
  which blocks a lookup finds in the cache (hits stop at the first miss);
* `draw_verify_step` — one speculative step: the guesses, the model's own picks at
  every position of the one forward pass, the accepted prefix and the bonus token;
* `plot_tokens_per_pass` — how many tokens each forward pass produced, per task;
* `plot_bucket_padding` — padded rows per real batch size, for sets of graph buckets;
* `draw_parallel_layouts` — tensor parallel, pipeline parallel (with its bubble) and
  disaggregated prefill/decode, side by side;
* `plot_stacking` — throughput of a memory-bound workload as two optimisations are
  switched on one at a time and together;
* `plot_code_size` — lines of code per part of minillm and of vLLM;
* `serve_on_a_block_pool` with `LowestIdFirst` — the replay behind the eviction-order
  cell after the check: the learner's lookup on a small block pool, two eviction orders.

The lesson computes every number; these functions only draw them (and replay the pool).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch

from minillm.widgets.style import COLORS

BONUS = "#E1A800"          # gold edge: the bonus token, the model's own pick


def _box(ax, x, y, w, h, text, fc, ec="#444444", color="white", fontsize=8, lw=0.8, **kw):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04", fc=fc, ec=ec, lw=lw, **kw))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, color=color)


def _arrow(ax, xy_from, xy_to, color="#666666", lw=1.0, style="->", **kw):
    ax.annotate("", xy=xy_to, xytext=xy_from, arrowprops=dict(arrowstyle=style, color=color, lw=lw, **kw))


# ---------------------------------------------------------------- prefix caching

def draw_prefix_hashes(prompts: dict[str, list[str]], ids: dict[str, list[int]], block_size: int,
                       block_hashes, cache: dict[int, int], first: str) -> None:
    """One row per prompt: its blocks of `block_size` words and their chained hashes.

    `block_hashes(token_ids, block_size)` is the function under study; `cache` maps the
    hashes registered by prompt `first` (which ran before the others) to blocks.
    """
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for row, (name, words) in enumerate(prompts.items()):
        y = 2.4 - 1.3 * row
        hashes = block_hashes(ids[name], block_size)
        hits, missed = [], False                       # hits stop at the first miss
        for h in hashes:
            missed = missed or h not in cache or name == first
            hits.append(not missed)
        ax.text(-0.6, y + 0.35, name, fontsize=12, weight="bold", ha="right", va="center")
        for k in range(-(-len(words) // block_size)):
            chunk = words[k * block_size:(k + 1) * block_size]
            full = (k + 1) * block_size <= len(words)
            colour = COLORS["free"] if not full else COLORS["decode"] if hits[k] else COLORS["prefill"]
            _box(ax, k * 4.6, y, 4.3, 0.7, " ".join(chunk), colour, color="white" if full else "#444444")
            label = f"h{k} = …{hashes[k] & 0xFFFF:04x}" if full else "partial: no hash"
            ax.text(k * 4.6 + 2.15, y - 0.25, label, ha="center", va="center", fontsize=8, family="monospace")
            if full and k > 0:
                _arrow(ax, (k * 4.6 - 1.0, y - 0.25), (k * 4.6 + 0.9, y - 0.25))
    ax.text(4.6 + 2.15, -0.85, "same words as A's block 1, different parent → different hash",
            ha="center", fontsize=8, color=COLORS["static"])
    ax.set_xlim(-1.2, 18.6)
    ax.set_ylim(-1.05, 3.3)
    ax.axis("off")
    ax.set_title("Chained block hashes (blocks of 4 words). Green: found in the cache; "
                 "blue: computed; grey: partial block", loc="left", fontsize=10)
    plt.show()


# ---------------------------------------------------------------- speculative decoding

def draw_verify_step(context: list[str], drafts: list[str], targets: list[str], appended: list[str]) -> None:
    """One speculative step of a greedy sequence.

    context: the last tokens the sequence already has (the last one is the real input
    token of this step); drafts: the k guesses; targets: the model's greedy pick after
    each input position that was *used* (accepted guesses + 1; later positions were
    computed and thrown away, drawn as "·"); appended: what the step added.
    """
    k, accepted = len(drafts), len(appended) - 1
    fig, ax = plt.subplots(figsize=(11, 4.2))
    w, gap = 1.25, 0.15
    x0 = -(len(context) - 1) * (w + gap)              # the real input token sits at x = 0
    for i, tok in enumerate(context):
        x = x0 + i * (w + gap)
        real_input = i == len(context) - 1
        _box(ax, x, 2.6, w, 0.6, tok, COLORS["decode"] if real_input else COLORS["free"],
             color="white" if real_input else "#444444")
    for i, tok in enumerate(drafts):
        _box(ax, (i + 1) * (w + gap), 2.6, w, 0.6, tok, COLORS["prefill"])
    ax.text(x0 - 0.2, 2.9, "input of the\none forward", ha="right", va="center", fontsize=8.5)
    ax.text((k + 1) * (w + gap) + w + 0.2, 2.9, f"{k} guesses\n(prompt lookup)", va="center",
            fontsize=8.5, color=COLORS["prefill"])
    for j in range(k + 1):                              # the pick after input position j
        x = (j + 1) * (w + gap)
        _arrow(ax, (j * (w + gap) + w / 2, 2.55), (x + w / 2, 1.75), color="#999999", lw=0.8)
        if j < len(targets):
            ok = j < k and j < accepted
            is_bonus = j == accepted
            fc = COLORS["decode"] if ok else (COLORS["free"])
            _box(ax, x, 1.1, w, 0.6, targets[j], fc, ec=BONUS if is_bonus else "#444444",
                 color="white" if ok else "#222222", lw=2.4 if is_bonus else 0.8)
            if j < k:
                ax.text(x + w / 2, 2.2, "✓ same" if ok else "✗ differs", ha="center", fontsize=8,
                        color=COLORS["decode"] if ok else COLORS["static"], weight="bold")
        else:
            _box(ax, x, 1.1, w, 0.6, "·", COLORS["free"], color="#999999")
    ax.text(x0 - 0.2, 1.4, "model's own\ngreedy pick", ha="right", va="center", fontsize=8.5)
    for i, tok in enumerate(appended):
        is_bonus = i == accepted
        _box(ax, (i + 1) * (w + gap), -0.2, w, 0.6, tok, COLORS["decode"],
             ec=BONUS if is_bonus else "#444444", lw=2.4 if is_bonus else 0.8)
    ax.text(x0 - 0.2, 0.1, "appended\nthis step", ha="right", va="center", fontsize=8.5)
    end = (len(appended)) * (w + gap) + w + 0.2
    ax.text(end, 0.1, f"{accepted} accepted guess{'es' if accepted != 1 else ''} + 1 bonus token "
            f"= {len(appended)} tokens from one forward", va="center", fontsize=9)
    ax.text(end, -0.45, "gold edge: the bonus — the model's own pick after the accepted prefix",
            va="center", fontsize=8, color="#7a5c00")
    ax.set_xlim(x0 - 2.0, (k + 2) * (w + gap) + 5.5)
    ax.set_ylim(-0.7, 3.5)
    ax.axis("off")
    ax.set_title("One verify step: the model checks every guess in one forward pass; the longest "
                 "agreeing prefix is kept,\nthen its own next token is added for free "
                 "(positions after the first mismatch were computed and thrown away: ·)",
                 loc="left", fontsize=10)
    plt.show()


def plot_tokens_per_pass(per_pass: dict[str, np.ndarray], k: int) -> None:
    """Histogram of tokens produced by each forward pass, one panel per task."""
    fig, axes = plt.subplots(1, len(per_pass), figsize=(10, 3), sharey=True)
    for ax, (task, counts) in zip(np.atleast_1d(axes), per_pass.items()):
        bins = np.bincount(counts, minlength=k + 2)[1:k + 2]
        ax.bar(range(1, k + 2), bins, color=COLORS["decode"])
        ax.set_xlabel("tokens produced by one forward pass")
        ax.set_title(f"{task}: {counts.mean():.2f} tokens per pass", loc="left")
    np.atleast_1d(axes)[0].set_ylabel("forward passes")
    fig.suptitle(f"Prompt-lookup speculation on SmolLM2 (k = {k}; real run)", x=0.01, ha="left")
    plt.tight_layout()
    plt.show()


# ---------------------------------------------------------------- CUDA graphs

def plot_bucket_padding(bucket_sets: dict[str, list[int]], max_batch: int) -> None:
    """Share of padded rows for each real batch size 1..max_batch, per bucket set."""
    sizes = np.arange(1, max_batch + 1)
    fig, ax = plt.subplots(figsize=(9, 3))
    for (name, buckets), colour in zip(bucket_sets.items(), (COLORS["idle"], COLORS["prefill"])):
        padded = np.array([min(b for b in buckets if b >= n) for n in sizes])
        ax.step(sizes, 100 * (1 - sizes / padded), where="mid", color=colour, lw=1.8, label=name)
    ax.set_xlabel("real batch size (decode sequences)")
    ax.set_ylabel("padded rows (%)")
    ax.set_title("Rows of wasted work per step when a batch runs as the next captured size", loc="left")
    ax.legend(fontsize=8)
    plt.show()


# ---------------------------------------------------------------- beyond one GPU

def _gpu(ax, x, y, w, h, title):
    ax.add_patch(plt.Rectangle((x, y), w, h, fc="white", ec=COLORS["text"], lw=1.2))
    ax.text(x + w / 2, y + h + 0.08, title, ha="center", va="bottom", fontsize=8, weight="bold")


def _tensor_parallel(ax, tp, layers):
    w, h = 1.6, 3.0
    for g in range(tp):
        x = g * (w + 0.35)
        _gpu(ax, x, 0, w, h, f"GPU {g}")
        for layer in range(layers):
            y = 0.2 + layer * (h - 0.4) / layers
            ax.add_patch(plt.Rectangle((x + 0.15, y), w - 0.3, 0.32, fc=COLORS["prefill"], alpha=0.85))
            ax.text(x + w / 2, y + 0.16, f"L{layer + 1}: 1/{tp} heads, 1/{tp} MLP", ha="center",
                    va="center", fontsize=6.2, color="white")
    for layer in range(layers):
        y = 0.2 + layer * (h - 0.4) / layers + 0.16
        _arrow(ax, (w - 0.1, y), (tp * (w + 0.35) - 0.25, y), color=COLORS["preempt"], style="<->", lw=1.2)
    ax.text(tp * (w + 0.35) / 2 - 0.2, -0.35, "every layer: 2 all-reduces across all GPUs\n(needs NVLink-class links)",
            ha="center", va="top", fontsize=7.5, color=COLORS["preempt"])
    ax.set_title(f"Tensor parallel (TP = {tp}): every GPU holds a slice of every layer", loc="left", fontsize=9)


def _pipeline_parallel(ax, pp, micro_batches, layers_total):
    w, h, per = 1.45, 1.2, layers_total // pp
    for s in range(pp):
        x = s * (w + 0.4)
        _gpu(ax, x, 2.0, w, h, f"GPU {s}")
        ax.add_patch(plt.Rectangle((x + 0.12, 2.2), w - 0.24, h - 0.4, fc=COLORS["decode"], alpha=0.85))
        ax.text(x + w / 2, 2.6, f"layers\n{s * per + 1}–{(s + 1) * per}", ha="center", va="center",
                fontsize=7, color="white")
        if s:
            _arrow(ax, (x - 0.4, 2.6), (x, 2.6), color=COLORS["text"])
    ax.text(pp * (w + 0.4) / 2, 1.75, "only activations cross stages", ha="center", fontsize=7.5)
    slots = micro_batches + pp - 1                       # GPipe-style forward schedule
    cw = (pp * (w + 0.4) - 0.4) / slots
    for s in range(pp):
        for t in range(slots):
            busy = 0 <= t - s < micro_batches
            ax.add_patch(plt.Rectangle((t * cw, 1.15 - s * 0.3), cw * 0.95, 0.26,
                                       fc=COLORS["decode"] if busy else COLORS["idle"], lw=0))
            if busy:
                ax.text(t * cw + cw / 2, 1.28 - s * 0.3, str(t - s + 1), ha="center", va="center",
                        fontsize=6.5, color="white")
        ax.text(-0.08, 1.28 - s * 0.3, f"GPU {s}", ha="right", va="center", fontsize=6.5)
    bubble = (pp - 1) / (micro_batches + pp - 1)
    ax.text(0, 1.15 - pp * 0.3 - 0.05, f"time →  {micro_batches} micro-batches over {pp} stages: "
            f"idle (pale red) = (p−1)/(m+p−1) = {bubble:.0%}", va="top", fontsize=7.5)
    ax.set_title(f"Pipeline parallel (PP = {pp}): each GPU holds a range of layers", loc="left", fontsize=9)


def _disaggregated(ax):
    for i, (label, x) in enumerate((("prefill GPU 0", 0.0), ("prefill GPU 1", 0.0))):
        _box(ax, x, 2.2 - i * 1.0, 2.0, 0.7, label, COLORS["prefill"])
    for i in range(2):
        _box(ax, 4.4, 2.2 - i * 1.0, 2.0, 0.7, f"decode GPU {i}", COLORS["decode"])
    _arrow(ax, (-1.6, 1.9), (-0.05, 2.45), color=COLORS["text"])
    _arrow(ax, (-1.6, 1.9), (-0.05, 1.45), color=COLORS["text"])
    ax.text(-1.7, 1.9, "new\nrequests", ha="right", va="center", fontsize=8)
    _arrow(ax, (2.05, 2.55), (4.35, 2.55), color=COLORS["preempt"], lw=2)
    _arrow(ax, (2.05, 1.55), (4.35, 1.55), color=COLORS["preempt"], lw=2)
    ax.text(3.2, 2.05, "KV cache\ntransfer", ha="center", va="center", fontsize=8, color=COLORS["preempt"])
    _arrow(ax, (6.45, 2.05), (7.6, 2.05), color=COLORS["text"])
    ax.text(7.7, 2.05, "token\nstreams", va="center", fontsize=8)
    ax.text(1.0, 0.75, "compute-bound, bursty:\nits own TP and batch size", ha="center", va="top", fontsize=7.5)
    ax.text(5.4, 0.75, "memory-bound, steady:\nno prefill ever stalls a stream", ha="center", va="top",
            fontsize=7.5)
    ax.set_title("Disaggregated prefill / decode: two pools, the KV cache shipped between them",
                 loc="left", fontsize=9)


def draw_parallel_layouts(tp: int = 4, pp: int = 4, micro_batches: int = 4, layers_total: int = 80) -> None:
    """Tensor parallel, pipeline parallel (with its bubble) and disaggregated serving."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4), gridspec_kw={"width_ratios": [1.15, 1.1, 1.15]})
    _tensor_parallel(axes[0], tp, layers=4)
    _pipeline_parallel(axes[1], pp, micro_batches, layers_total)
    _disaggregated(axes[2])
    limits = [((-0.4, tp * 1.95), (-1.0, 3.5)), ((-0.9, pp * 1.85), (-0.3, 3.5)), ((-2.6, 9.0), (0.0, 3.3))]
    for ax, (xlim, ylim) in zip(axes, limits):
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ax.axis("off")
    plt.tight_layout()
    plt.show()


# ---------------------------------------------------------------- stacking and size

def plot_stacking(labels: list[str], throughputs: list[float], title: str) -> None:
    """Generated tokens/s of one workload under each combination of optimisations."""
    fig, ax = plt.subplots(figsize=(8, 2.8))
    colours = [COLORS["free"], COLORS["prefill"], COLORS["decode"], COLORS["chunked"]]
    y = np.arange(len(labels))
    ax.barh(y, throughputs, color=colours[:len(labels)], edgecolor="#444444", lw=0.6)
    for i, v in enumerate(throughputs):
        ax.text(v, i, f" {v:.3g}  ({v / throughputs[0]:.2f}× the baseline)", va="center", fontsize=8)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.45 * max(throughputs))
    ax.set_xlabel("generated tokens/s (simulated)")
    ax.set_title(title, loc="left", fontsize=10)
    plt.show()


def plot_code_size(parts: dict[str, dict[str, int]]) -> None:
    """Horizontal bars, log scale: lines of code per part, one panel per project."""
    fig, axes = plt.subplots(1, len(parts), figsize=(12, 3.4))
    for ax, (project, counts), colour in zip(np.atleast_1d(axes), parts.items(),
                                              (COLORS["decode"], COLORS["prefill"])):
        names = list(counts)[::-1]
        ax.barh(names, [counts[n] for n in names], color=colour)
        ax.set_xscale("log")
        ax.set_xlabel("lines of Python (non-blank, non-comment; log scale)")
        ax.set_title(project, loc="left", fontsize=10)
        ax.tick_params(axis="y", labelsize=8)
    plt.tight_layout()
    plt.show()


# ---------------------------------------------------------------------- the eviction replay

class LowestIdFirst:
    """The answer key's allocation order as an eviction order: the lowest free block id,
    whatever it caches (the interface of the exercise's `LRUEviction`)."""

    def __init__(self):
        self.free: set[int] = set()

    def freed(self, block_id: int) -> None:
        self.free.add(block_id)

    def revived(self, block_id: int) -> None:
        self.free.discard(block_id)

    def victim(self) -> int:
        block_id = min(self.free)
        self.free.discard(block_id)
        return block_id


def serve_on_a_block_pool(prompts, num_blocks: int, block_size: int, evictor, ex10) -> list[int]:
    """Replay prompts one at a time on `num_blocks` KV blocks with prefix caching, using the
    exercise's `longest_cached_prefix` / `register_blocks` and an eviction order: hit,
    take fresh blocks from `evictor` (their old entries forgotten), finish, free the tail
    first. Returns the prompt tokens each request found in the cache."""
    cache, served = {}, []
    for block in range(num_blocks):
        evictor.freed(block)
    for prompt in prompts:
        hits = ex10.longest_cached_prefix(prompt, cache, block_size)
        for block in hits:
            evictor.revived(block)
        fresh = [evictor.victim() for _ in range(-(-len(prompt) // block_size) - len(hits))]
        for h in [h for h, entry in cache.items() if entry.block_id in fresh]:
            del cache[h]                                 # their old contents are gone
        table = hits + fresh
        ex10.register_blocks(cache, prompt, table, len(prompt), block_size)
        for block in reversed(table):
            evictor.freed(block)
        served.append(len(hits) * block_size)
    return served
