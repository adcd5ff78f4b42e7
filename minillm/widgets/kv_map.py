"""KV block map: where the KV cache's memory goes, contiguous vs paged, step by step.

    KVBlockMap()                                   # simulator: static+contiguous vs continuous+paged
    KVBlockMap(left="continuous+contiguous")       # any of the four `scheduler.VARIANTS`
    KVBlockMap(runs={"static": run_a, "paged": run_b})   # recorded real runs (see below)
    KVBlockMap(runs={"static": llm.trace})         # a bare Trace: a logical layout

Each panel is the cache, one cell per KV block, after the chosen engine step:

* a block **holding tokens** is coloured by the request that owns it (one colour per
  request, so a paged sequence's blocks can be seen scattered over the cache); a
  partly filled block is filled from the left in proportion to its tokens;
* a block **reserved but empty** (pale red) belongs to a request but holds no token
  yet — the tail of a contiguous `prompt + max_tokens` reservation, or the unused end
  of a paged sequence's last block;
* a **free** block is light grey; blocks a **preemption** just took away are outlined
  in orange.

Under each map, a timeline of the whole run: blocks in use vs blocks' worth of tokens
actually held, the current step marked, preemptions as orange ticks. The headline
numbers are the Trace's: blocks used / free, the share of used memory holding tokens
now and time-averaged (`metrics.kv_utilization`), resident sequences, throughput.

Physical block ids are not in a Trace (it records counts), so the simulator runs are
recorded with a `BlockMapRecorder`, which snapshots every holder's block table after
each step. Record a real run the same way:

    with BlockMapRecorder(llm.llm_engine) as rec:
        llm.generate(prompts, params)
    KVBlockMap(runs={"paged": rec.run()})

A bare Trace still works: its owners are reconstructed from the Trace (the engine
stepper's `replay`) and packed in request order — a logical layout, labelled as such.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from minillm.kv_cache import cdiv
from minillm.scheduler import VARIANTS
from minillm.simulate import make_sim_engine
from minillm.metrics import generated_tokens, kv_utilization
from minillm.simulate import add_workload, run_to_completion
from minillm.trace import Trace
from minillm.widgets.style import COLORS
from minillm.workload import RequestSpec, lognormal, make_workload

FREE, UNKNOWN = -1, -2                 # owner codes of a block that no request holds
OWNER_COLORS = ("#4C72B0", "#55A868", "#8172B3", "#64B5CD", "#937860", "#DA8BC3",
                "#2F4B7C", "#3D8C6E", "#B07AA1", "#4E9A9A", "#7A6A3A", "#5D7FD6")
UNKNOWN_COLOR = "#9A9A9A"


# ---------------------------------------------------------------------- recording

@dataclass
class BlockMapRun:
    """A Trace plus, per step, what every KV block held after that step.

    owners[s, b]: index into `request_ids` of the request holding block b after step s
    (FREE, or UNKNOWN for a used block a logical layout cannot attribute);
    tokens[s, b]: how many of the block's `block_size` slots hold a token.
    """

    trace: Trace
    owners: np.ndarray                 # [steps, num_blocks] int
    tokens: np.ndarray                 # [steps, num_blocks] int
    request_ids: list[str]
    block_size: int
    physical: bool = True              # False: packed logical layout rebuilt from a Trace
    name: str = ""

    @property
    def num_steps(self) -> int:
        return self.owners.shape[0]

    @property
    def num_blocks(self) -> int:
        return self.owners.shape[1]


def snapshot(scheduler, request_index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(owners [num_blocks], tokens [num_blocks]) of the scheduler's KV cache right now."""
    kv = scheduler.kv
    owners = np.full(kv.num_blocks, FREE, dtype=np.int32)
    tokens = np.zeros(kv.num_blocks, dtype=np.int32)
    bs = kv.block_size
    for seq in scheduler.kv_holders():
        k = request_index.setdefault(seq.request_id, len(request_index))
        for j, block in enumerate(seq.block_table):
            owners[block] = k
            tokens[block] = min(bs, max(0, seq.num_computed_tokens - j * bs))
    return owners, tokens


class BlockMapRecorder:
    """Snapshot the block tables after every engine step (wraps `engine.step`).

    Use as a context manager around `llm.generate(...)` (pass `llm.llm_engine`) or
    around a simulator run; `run()` returns the `BlockMapRun` of the latest Trace.
    """

    def __init__(self, engine):
        self.engine = engine
        self._trace = None
        self._owners: list[np.ndarray] = []
        self._tokens: list[np.ndarray] = []
        self._index: dict[str, int] = {}
        self._step = engine.step
        engine.step = self._recording_step          # instance attribute shadows the method

    def _recording_step(self):
        outputs = self._step()
        trace = self.engine.trace
        if trace is not self._trace:                 # generate() started a fresh Trace
            self._trace, self._owners, self._tokens, self._index = trace, [], [], {}
        while len(self._owners) < len(trace.steps):
            owners, tokens = snapshot(self.engine.scheduler, self._index)
            self._owners.append(owners)
            self._tokens.append(tokens)
        return outputs

    def close(self) -> None:
        if self.engine.__dict__.get("step") == self._recording_step:
            del self.engine.step

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, name: str = "") -> BlockMapRun:
        if self._trace is None or not self._owners:
            raise ValueError("nothing recorded yet: run the engine inside the recorder")
        ids = sorted(self._index, key=self._index.get)
        return BlockMapRun(self._trace, np.stack(self._owners), np.stack(self._tokens), ids,
                           self.engine.scheduler.kv.block_size, True, name)


def run_from_trace(trace: Trace, name: str = "") -> BlockMapRun:
    """A logical BlockMapRun from a bare Trace: owners packed in request order."""
    from minillm.widgets.stepper import replay
    views = replay(trace)
    block_size = trace.config.get("block_size") or 1
    num_blocks = views[0].num_kv_blocks
    index: dict[str, int] = {}
    owners = np.full((len(views), num_blocks), FREE, dtype=np.int32)
    tokens = np.zeros((len(views), num_blocks), dtype=np.int32)
    for s, view in enumerate(views):
        b = 0
        for rid, blocks, held in view.kv_owners:
            k = index.setdefault(rid, len(index))
            for j in range(min(blocks, num_blocks - b)):
                owners[s, b] = k
                tokens[s, b] = min(block_size, max(0, held - j * block_size))
                b += 1
        owners[s, b:b + view.kv_blocks_unattributed] = UNKNOWN
        tokens[s, b:b + view.kv_blocks_unattributed] = block_size
    ids = sorted(index, key=index.get)
    return BlockMapRun(trace, owners, tokens, ids, block_size, False, name)


def as_run(value, name: str = "") -> BlockMapRun:
    if isinstance(value, BlockMapRun):
        return dataclasses.replace(value, name=name or value.name)
    if isinstance(value, Trace):
        return run_from_trace(value, name)
    raise TypeError(f"expected a BlockMapRun or a Trace, got {type(value).__name__}")


# ---------------------------------------------------------------------- the simulator side

def default_workload(num_requests: int = 32, max_tokens: int = 256, seed: int = 0) -> list[RequestSpec]:
    """Chat-like requests, all at t = 0: ~40-token prompts, answers of median 40 tokens
    (a long tail), every client sending the same `max_tokens` cap."""
    output = lognormal(40, 0.8, cap=max_tokens)
    return make_workload(num_requests, lognormal(40, 0.3, cap=128), output,
                         max_tokens=max_tokens, seed=seed)


def simulate_block_map(workload: list[RequestSpec], variant: str, **engine_kwargs) -> BlockMapRun:
    """Simulate one of the four `scheduler.VARIANTS` and record its block map."""
    engine = make_sim_engine(variant, **engine_kwargs)
    add_workload(engine, workload)
    with BlockMapRecorder(engine) as recorder:
        run_to_completion(engine, max_steps=100_000)
    return recorder.run(variant)


# ---------------------------------------------------------------------- numbers

def step_numbers(run: BlockMapRun, index: int) -> dict:
    """What the panel says about step `index` (every number from the run itself)."""
    trace, bs = run.trace, run.block_size
    step = trace.steps[index]
    owners, tokens = run.owners[index], run.tokens[index]
    used = owners != FREE
    held = int(tokens[used].sum())
    preempted_total = sum(len(s.preempted) for s in trace.steps)
    duration = trace.duration
    return {
        "name": run.name, "step": index, "num_steps": run.num_steps, "time": step.end_time,
        "blocks_used": int(used.sum()), "blocks_free": int((~used).sum()),
        "trace_blocks_used": step.kv_blocks_used,
        "blocks_reserved_empty": int((used & (tokens == 0)).sum()),
        "tokens_held": held,
        "utilization_now": held / (int(used.sum()) * bs) if used.any() else float("nan"),
        "utilization_avg": kv_utilization(trace, bs),
        "resident": len(set(owners[owners >= 0].tolist())),
        "max_resident": max(len(set(o[o >= 0].tolist())) for o in run.owners),
        "running": len(step.scheduled), "waiting": step.num_waiting,
        "preempted_now": list(step.preempted), "preemptions": preempted_total,
        "duration": duration,
        "tokens_per_s": generated_tokens(trace) / duration if duration > 0 else float("nan"),
        "physical": run.physical,
    }


# ---------------------------------------------------------------------- drawing

def block_image(owners: np.ndarray, tokens: np.ndarray, block_size: int, cols: int, px: int,
                lost: np.ndarray | None = None) -> np.ndarray:
    """The map as an RGB image [rows*px, cols*px, 3].

    Each block is a px × px cell: owner colour over the filled fraction (from the left),
    pale red over the rest of an owned block, light grey if free; white grid lines;
    `lost` (bool [num_blocks]) outlines blocks in the preemption colour.
    """
    from matplotlib.colors import to_rgb
    n = len(owners)
    rows = cdiv(n, cols)
    palette = np.array([to_rgb(c) for c in OWNER_COLORS])             # [P, 3]
    owner_rgb = np.ones((rows * cols, 3))                              # [cells, 3]
    owner_rgb[:n] = to_rgb(COLORS["free"])
    mine = owners >= 0
    owner_rgb[:n][mine] = palette[owners[mine] % len(palette)]
    owner_rgb[:n][owners == UNKNOWN] = to_rgb(UNKNOWN_COLOR)
    empty_rgb = owner_rgb.copy()
    empty_rgb[:n][owners != FREE] = to_rgb(COLORS["idle"])
    filled = np.zeros(rows * cols)
    filled[:n] = np.where(owners != FREE, tokens / block_size, 0.0)
    columns = (np.arange(px) + 0.5) / px                               # [px] cell x-centres
    in_fill = columns[None, :] < filled[:, None]                       # [cells, px]
    cell = np.where(in_fill[:, None, :, None], owner_rgb[:, None, None, :],
                    empty_rgb[:, None, None, :])                        # [cells, 1, px, 3]
    cell = np.repeat(cell, px, axis=1)                                 # [cells, px, px, 3]
    if lost is not None and lost.any():
        edge = np.zeros((px, px), dtype=bool)
        edge[[0, -2], :] = edge[:, [0, -2]] = True
        cell[:n][lost] = np.where(edge[None, :, :, None], to_rgb(COLORS["preempt"]), cell[:n][lost])
    cell[:, px - 1, :, :] = 1.0                                        # grid lines
    cell[:, :, px - 1, :] = 1.0
    image = cell.reshape(rows, cols, px, px, 3).transpose(0, 2, 1, 3, 4)
    return image.reshape(rows * px, cols * px, 3)


def grid_shape(num_blocks: int) -> tuple[int, int]:
    """(columns, pixels per cell) for a map of `num_blocks` cells."""
    cols = int(min(48, max(8, math.ceil(math.sqrt(2 * num_blocks)))))
    px = 12 if cols <= 24 else 8
    return cols, px


def draw_usage(ax, run: BlockMapRun, t_max: float | None = None):
    """Blocks in use vs blocks' worth of tokens held, over the run; returns a cursor line.

    The gap between the two areas is memory that is owned but empty. Orange triangles
    mark steps with a preemption.
    """
    t = [s.end_time for s in run.trace.steps]
    used = (run.owners != FREE).sum(axis=1)                  # [steps]
    held = run.tokens.sum(axis=1) / run.block_size           # [steps]
    ax.fill_between(t, 0, used, step="post", color=COLORS["idle"], lw=0, label="blocks in use")
    ax.fill_between(t, 0, held, step="post", color=OWNER_COLORS[0], lw=0, alpha=0.8,
                    label="tokens held (in blocks)")
    ax.set_ylim(0, run.num_blocks * 1.08)
    ax.set_xlim(0, max(t_max or t[-1], 1e-9))
    for s in run.trace.steps:
        if s.preempted:
            ax.plot([s.end_time], [run.num_blocks * 1.03], marker="v", ms=5,
                    color=COLORS["preempt"], ls="none")
    ax.set_xlabel("time (s)", labelpad=1, fontsize=8)
    ax.set_ylabel("blocks", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 0.98), fontsize=7, ncol=2)
    return ax.axvline(t[0], color=COLORS["text"], lw=1.2)


def draw_map(ax, run: BlockMapRun, step: int, cols: int | None = None) -> None:
    """The block map of one step on `ax` (a static version of one widget panel)."""
    default_cols, px = grid_shape(run.num_blocks)
    cols = cols or default_cols
    lost = lost_blocks(run, step)
    ax.imshow(block_image(run.owners[step], run.tokens[step], run.block_size, cols, px, lost),
              interpolation="nearest")
    ax.set_xticks([]), ax.set_yticks([]), ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)


def lost_blocks(run: BlockMapRun, step: int) -> np.ndarray | None:
    """Blocks freed at `step` because their owner was preempted (bool [num_blocks])."""
    if step == 0 or not run.trace.steps[step].preempted:
        return None
    victims = [run.request_ids.index(r) for r in run.trace.steps[step].preempted
               if r in run.request_ids]
    return np.isin(run.owners[step - 1], victims) & (run.owners[step] == FREE)


class BlockMapFigure:
    """Side-by-side maps + timelines, built once; `png(index)` updates and renders."""

    def __init__(self, runs: list[BlockMapRun], dpi: int = 90):
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
        self.runs, self.dpi = runs, dpi
        n = len(runs)
        max_blocks = max(r.num_blocks for r in runs)
        cols, self.px = grid_shape(max_blocks)
        self.cols = cols
        rows = cdiv(max_blocks, cols)
        panel_w = 5.3
        map_h = min(4.2, max(1.2, panel_w * rows / cols))
        width, head, line_h = 0.5 + n * (panel_w + 0.45), 1.35, 1.25
        legend_h = 0.45 if n > 1 else 0.7
        height = head + map_h + 0.5 + line_h + legend_h
        self.fig = fig = Figure(figsize=(width, height), dpi=dpi)

        def axes(left, bottom, w, h):
            return fig.add_axes((left / width, bottom / height, w / width, h / height))

        self.titles, self.images, self.cursors = [], [], []
        t_max = max(r.trace.steps[-1].end_time for r in runs)    # one time axis for all
        for i, run in enumerate(runs):
            left = 0.5 + i * (panel_w + 0.45)
            fig.text(left / width, 1 - 0.22 / height, run.name or f"run {i + 1}",
                     fontsize=11, weight="bold", va="center")
            self.titles.append(fig.text(left / width, 1 - 0.4 / height, "", fontsize=8.5,
                                        va="top", linespacing=1.35))
            ax = axes(left, legend_h + line_h + 0.5, panel_w, map_h)
            self.images.append(ax.imshow(np.ones((2, 2, 3)), interpolation="nearest",
                                         aspect="auto"))
            ax.set_xticks([]), ax.set_yticks([]), ax.grid(False)
            for spine in ax.spines.values():
                spine.set_visible(False)
            ax.set_title("KV cache after the step (logical layout: rebuilt from the Trace)"
                         if not run.physical else "KV cache after the step (one cell = one block)",
                         loc="left", fontsize=9)
            ax = axes(left + 0.35, legend_h + 0.15, panel_w - 0.35, line_h - 0.1)
            self.cursors.append(draw_usage(ax, run, t_max))
        handles = [Patch(color=OWNER_COLORS[0], label="holding tokens (colour = request)"),
                   Patch(color=COLORS["idle"], label="owned, no token in it"),
                   Patch(color=COLORS["free"], label="free"),
                   Patch(facecolor="white", edgecolor=COLORS["preempt"], lw=2,
                         label="taken back by a preemption")]
        fig.legend(handles=handles, ncol=4 if n > 1 else 2, loc="lower left", fontsize=8,
                   bbox_to_anchor=(0.5 / width, 0.0), handlelength=1.2)

    def update(self, steps: list[int]) -> list[dict]:
        """Show step `steps[i]` of run i; return each panel's numbers."""
        numbers = []
        for i, (run, k) in enumerate(zip(self.runs, steps)):
            image = block_image(run.owners[k], run.tokens[k], run.block_size, self.cols,
                                self.px, lost_blocks(run, k))
            self.images[i].set_data(image)
            self.images[i].set_extent((-0.5, image.shape[1] - 0.5, image.shape[0] - 0.5, -0.5))
            self.images[i].axes.set_xlim(-0.5, self.cols * self.px - 0.5)
            self.images[i].axes.set_ylim(cdiv(max(r.num_blocks for r in self.runs), self.cols)
                                         * self.px - 0.5, -0.5)
            self.cursors[i].set_xdata([run.trace.steps[k].end_time] * 2)
            nums = step_numbers(run, k)
            numbers.append(nums)
            self.titles[i].set_text(headline(nums, run.block_size))
        return numbers

    def png(self) -> bytes:
        import io
        buffer = io.BytesIO()
        self.fig.savefig(buffer, format="png", dpi=self.dpi)
        return buffer.getvalue()


def headline(n: dict, block_size: int) -> str:
    done = "" if n["step"] < n["num_steps"] - 1 else "  (last step)"
    from minillm.widgets.stepper import short_id
    pre = (f"  ·  PREEMPTED {', '.join(short_id(r) for r in n['preempted_now'])}"
           if n["preempted_now"] else "")
    return (f"step {n['step']} of {n['num_steps'] - 1}, t = {n['time']:.2f} s{done}{pre}\n"
            f"blocks used {n['blocks_used']} / free {n['blocks_free']}  ·  holding tokens now "
            f"{n['utilization_now']:.0%}, time-averaged {n['utilization_avg']:.1%}\n"
            f"resident {n['resident']} (max {n['max_resident']})  ·  waiting {n['waiting']}  ·  "
            f"preemptions {n['preemptions']}  ·  {n['tokens_per_s']:.0f} tokens/s")


def draw_block_tables(ax, tables: dict[str, tuple[list[int], int]], num_blocks: int,
                      block_size: int, cols: int = 8) -> None:
    """Logical blocks (left, with the block table) → where they live in the physical pool.

    `tables`: name → (block table, tokens stored). Each logical block is filled in
    proportion to the tokens it holds; the physical cell shows which sequence and
    which of its logical blocks lives there. Meant for small examples (a few
    sequences of a few blocks each).
    """
    from matplotlib.patches import Rectangle
    from matplotlib.colors import to_rgb
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
            ax.add_patch(Rectangle((px, py), 1, 1, fc=to_rgb(color), ec="white"))
            ax.add_patch(Rectangle((px + fill, py), 1 - fill, 1, fc=COLORS["idle"], ec="none"))
            ax.text(px + 0.5, py + 0.45, f"{name[:6]}\nL{j}", ha="center", va="center",
                    fontsize=5.5, color="white")
    ax.text(0, 1.5, "block tables (logical blocks, in order)", fontsize=9, weight="bold")
    ax.text(gx, 1.5, f"physical KV blocks (block_size {block_size})", fontsize=9, weight="bold")
    ax.set_xlim(-2.5, gx + cols * 1.1 + 0.2)
    ax.set_ylim(min(-rows * 1.1, -len(tables) * 1.6) - 0.3, 2.1)
    ax.set_aspect("equal")
    ax.axis("off")


# ---------------------------------------------------------------------- the widget

class KVBlockMap:
    """Contiguous vs paged KV memory, side by side. `.widget`, controls, `.result`.

    Simulator mode (no `runs`): `.left` / `.right` (variant dropdowns), `.block_size`,
    `.num_kv_blocks`, `.max_tokens` (the clients' cap), `.num_requests`; changing any
    of them re-simulates. Always: `.step` (slider), `.image` (PNG), `.numbers` (HTML).
    """

    def __init__(self, runs: dict | None = None, *, left: str = "static+contiguous",
                 right: str = "continuous+paged", block_size: int = 16,
                 num_kv_blocks: int = 128, max_tokens: int = 256, num_requests: int = 32,
                 max_num_seqs: int = 32, seed: int = 0, sync: str = "time"):
        import ipywidgets as w
        if sync not in ("time", "step"):
            raise ValueError(f"sync must be 'time' or 'step', got {sync!r}")
        self.simulated = runs is None
        self.max_num_seqs, self.seed = max_num_seqs, seed
        self.result: dict = {}
        style = {"description_width": "110px"}
        names = list(VARIANTS)
        self.left = w.Dropdown(options=names, value=left, description="left panel", style=style)
        self.right = w.Dropdown(options=names, value=right, description="right panel", style=style)
        self.block_size = w.Dropdown(options=[1, 2, 4, 8, 16, 32, 64], value=block_size,
                                     description="block size", style=style)
        self.num_kv_blocks = w.IntSlider(value=num_kv_blocks, min=16, max=512, step=16,
                                         description="KV blocks", style=style,
                                         continuous_update=False)
        self.max_tokens = w.IntSlider(value=max_tokens, min=32, max=1024, step=32,
                                      description="max_tokens cap", style=style,
                                      continuous_update=False)
        self.num_requests = w.IntSlider(value=num_requests, min=4, max=96, step=4,
                                        description="requests", style=style,
                                        continuous_update=False)
        self.sync = sync
        self.step = w.IntSlider(value=0, min=0, max=1, description="step", style=style,
                                continuous_update=False, layout=w.Layout(width="520px"))
        self.play = w.Play(value=0, min=0, max=1, interval=300, description="play")
        w.link((self.play, "value"), (self.step, "value"))
        self.image = w.Image(format="png")
        self.numbers = w.HTML()
        self.config_controls = [self.left, self.right, self.block_size, self.num_kv_blocks,
                                self.max_tokens, self.num_requests]
        if self.simulated:
            self._rerun()
            for c in self.config_controls:
                c.observe(self._on_config, names="value")
            rows = [w.HBox([self.left, self.right, self.block_size]),
                    w.HBox([self.num_kv_blocks, self.max_tokens, self.num_requests])]
        else:
            self.runs = [as_run(v, k) for k, v in runs.items()]
            self._new_figure()
            rows = []
        self.step.observe(lambda ch: self._show(ch["new"]), names="value")
        self.widget = w.VBox([*rows, w.HBox([self.play, self.step]), self.numbers, self.image])
        self._show(self.step.value)

    # -------------------------------------------------------------- simulation
    def workload(self) -> list[RequestSpec]:
        return default_workload(self.num_requests.value, self.max_tokens.value, self.seed)

    def _rerun(self) -> None:
        start = time.perf_counter()
        workload = self.workload()
        kwargs = dict(block_size=self.block_size.value, max_num_seqs=self.max_num_seqs,
                      num_kv_blocks=self._num_blocks(workload))
        self.runs = [simulate_block_map(workload, v, **kwargs)
                     for v in (self.left.value, self.right.value)]
        self.simulate_seconds = time.perf_counter() - start
        self._new_figure()

    def _num_blocks(self, workload) -> int:
        """The KV budget in blocks of 16 tokens, re-expressed in the chosen block size
        (the same memory whatever the block size); at least one worst-case request."""
        tokens = self.num_kv_blocks.value * 16
        need = max(cdiv(s.prompt_len + s.max_tokens, self.block_size.value) for s in workload)
        return max(tokens // self.block_size.value, need)

    def _new_figure(self) -> None:
        self.figure = BlockMapFigure(self.runs)
        self.ends = [[s.end_time for s in r.trace.steps] for r in self.runs]
        self.moments = sorted({t for ends in self.ends for t in ends})
        if self.sync == "step" or len(self.runs) == 1:
            last = max(r.num_steps for r in self.runs) - 1
        else:
            last = len(self.moments) - 1
        self.play.max = self.step.max = last
        if self.step.value > last:
            self.step.value = last

    def _on_config(self, _change) -> None:
        self._rerun()
        self._show(self.step.value)

    # -------------------------------------------------------------- display
    def panel_steps(self, index: int) -> list[int]:
        """Which step each panel shows for slider value `index`.

        sync="step" (or one panel): step `index` of every run (its last step once a run
        is over). sync="time": the slider walks every run's step ends in time order,
        and each panel shows its latest step that ended by then — both panels at the
        same moment, so a faster run visibly finishes first.
        """
        if self.sync == "step" or len(self.runs) == 1:
            return [min(index, r.num_steps - 1) for r in self.runs]
        t = self.moments[index]
        return [max(0, bisect.bisect_right(ends, t) - 1) for ends in self.ends]

    def _show(self, index: int) -> None:
        start = time.perf_counter()
        steps = self.panel_steps(index)
        panels = self.figure.update(steps)
        self.image.value = self.figure.png()
        self.result = {"step": index, "panel_steps": steps,
                       "panels": {p["name"]: p for p in panels},
                       "left": panels[0], "right": panels[-1],
                       "draw_seconds": time.perf_counter() - start}
        self.numbers.value = numbers_html(panels)

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)


def numbers_html(panels: list[dict]) -> str:
    head = "".join(f"<th style='padding:0 12px'>{p['name']}</th>" for p in panels)
    rows = [("KV memory holding tokens, time-averaged", "utilization_avg", "{:.1%}"),
            ("… at this step", "utilization_now", "{:.0%}"),
            ("most sequences resident at once", "max_resident", "{}"),
            ("preemptions", "preemptions", "{}"),
            ("run time (s)", "duration", "{:.2f}"),
            ("generated tokens / s", "tokens_per_s", "{:.0f}")]
    body = "".join(
        f"<tr><td>{label}</td>"
        + "".join(f"<td style='text-align:right;padding:0 12px'>"
                  f"{'—' if _nan(p[key]) else fmt.format(p[key])}</td>" for p in panels)
        + "</tr>" for label, key, fmt in rows)
    return f"<table><tr><th></th>{head}</tr>{body}</table>"


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)
