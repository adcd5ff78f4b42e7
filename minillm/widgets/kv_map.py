"""KV block map: where the KV cache's memory goes, contiguous vs paged, step by step.

    KVBlockMap()                                   # simulator: static+contiguous vs paged
    KVBlockMap(left="continuous+contiguous")       # any of the four `scheduler.VARIANTS`
    KVBlockMap(runs={"paged": llm.trace})          # LLM(..., record_block_tables=True)
    KVBlockMap(runs={"static": block_map(trace)})  # a `layout.BlockMap` works too

Each panel is the cache, one cell per KV block, after the chosen engine step (the block
map of `draw.py`): a block holding tokens is coloured by the request that owns it, so a
paged sequence's blocks can be seen scattered over the cache; a partly filled block is
filled from the left in proportion to its tokens; a block reserved but empty (pale red)
belongs to a request but holds no token yet — the tail of a contiguous `prompt +
max_tokens` reservation, or the unused end of a paged sequence's last block; a free
block is light grey; blocks a preemption just took away are outlined in orange.

Under each map, a timeline of the whole run: blocks in use vs blocks' worth of tokens
actually held, the current step marked, preemptions as orange ticks. The headline
numbers are the Trace's: blocks used / free, the share of used memory holding tokens
now and time-averaged (`metrics.kv_utilization`), resident sequences, throughput.

Which block belongs to whom comes from the Trace's block tables, recorded when the
engine is built with `record_block_tables=True`; a Trace without them is refused with
a ValueError that says so.
"""

from __future__ import annotations

import bisect
import time

import numpy as np

from minillm.kv_cache import cdiv
from minillm.scheduler import VARIANTS
from minillm.sim.metrics import generated_tokens, kv_utilization
from minillm.sim.simulate import simulate
from minillm.sim.workload import RequestSpec, chat_burst
from minillm.widgets.base import CourseWidget, html_table
from minillm.widgets.draw import OWNER_COLORS, block_image, draw_usage, grid_shape
from minillm.widgets.layout import FREE, BlockMap, as_block_map, block_map, short_id
from minillm.widgets.style import COLORS, redraw_png


def step_numbers(blocks: BlockMap, index: int) -> dict:
    """What a panel says about step `index` (every number from the map and its Trace)."""
    trace, bs = blocks.trace, blocks.block_size
    step = trace.steps[index]
    owners, tokens = blocks.owners[index], blocks.tokens[index]           # [num_blocks]
    used = owners != FREE
    held = int(tokens[used].sum())
    duration = trace.duration
    return {
        "name": blocks.name, "step": index, "num_steps": blocks.num_steps, "time": step.end_time,
        "blocks_used": int(used.sum()), "blocks_free": int((~used).sum()),
        "trace_blocks_used": step.kv_blocks_used,
        "blocks_reserved_empty": int((used & (tokens == 0)).sum()),
        "tokens_held": held,
        "utilization_now": held / (int(used.sum()) * bs) if used.any() else float("nan"),
        "utilization_avg": kv_utilization(trace, bs),
        "resident": len(set(owners[used].tolist())),
        "max_resident": max(len(set(o[o != FREE].tolist())) for o in blocks.owners),
        "running": len(step.scheduled), "waiting": step.num_waiting,
        "preempted_now": list(step.preempted),
        "preemptions": sum(len(s.preempted) for s in trace.steps),
        "duration": duration,
        "tokens_per_s": generated_tokens(trace) / duration if duration > 0 else float("nan"),
    }


def headline(n: dict) -> str:
    """The three lines above a panel."""
    done = "" if n["step"] < n["num_steps"] - 1 else "  (last step)"
    pre = (f"  ·  PREEMPTED {', '.join(short_id(r) for r in n['preempted_now'])}"
           if n["preempted_now"] else "")
    return (f"step {n['step']} of {n['num_steps'] - 1}, t = {n['time']:.2f} s{done}{pre}\n"
            f"blocks used {n['blocks_used']} / free {n['blocks_free']}  ·  holding tokens now "
            f"{n['utilization_now']:.0%}, time-averaged {n['utilization_avg']:.1%}\n"
            f"resident {n['resident']} (max {n['max_resident']})  ·  waiting {n['waiting']}  ·  "
            f"preemptions {n['preemptions']}  ·  {n['tokens_per_s']:.0f} tokens/s")


def numbers_html(panels: list[dict]) -> str:
    """The table under the controls: one column per panel."""
    return html_table({p["name"]: p for p in panels}, [
        ("KV memory holding tokens, time-averaged", "utilization_avg", "{:.1%}"),
        ("… at this step", "utilization_now", "{:.0%}"),
        ("most sequences resident at once", "max_resident", "{}"),
        ("preemptions", "preemptions", "{}"),
        ("run time (s)", "duration", "{:.2f}"),
        ("generated tokens / s", "tokens_per_s", "{:.0f}")])


class BlockMapFigure:
    """Side-by-side maps + timelines, built once; `update(steps)` then `png()` renders."""

    def __init__(self, maps: list[BlockMap], dpi: int = 90):
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
        self.maps, self.dpi = maps, dpi
        n = len(maps)
        self.max_blocks = max(m.num_blocks for m in maps)
        self.cols, self.px = grid_shape(self.max_blocks)
        rows = cdiv(self.max_blocks, self.cols)
        panel_w = 5.3
        map_h = min(4.2, max(1.2, panel_w * rows / self.cols))
        width, line_h = 0.5 + n * (panel_w + 0.45), 1.25
        legend_h = 0.45 if n > 1 else 0.7
        height = 1.35 + map_h + 0.5 + line_h + legend_h
        self.fig = fig = Figure(figsize=(width, height), dpi=dpi)

        def axes(left, bottom, w, h):
            return fig.add_axes((left / width, bottom / height, w / width, h / height))

        self.titles, self.images, self.cursors = [], [], []
        t_max = max(m.trace.steps[-1].end_time for m in maps)       # one time axis for all
        for i, blocks in enumerate(maps):
            left = 0.5 + i * (panel_w + 0.45)
            fig.text(left / width, 1 - 0.22 / height, blocks.name or f"run {i + 1}",
                     fontsize=11, weight="bold", va="center")
            self.titles.append(fig.text(left / width, 1 - 0.4 / height, "", fontsize=8.5,
                                        va="top", linespacing=1.35))
            ax = axes(left, legend_h + line_h + 0.5, panel_w, map_h)
            self.images.append(ax.imshow(np.ones((2, 2, 3)), interpolation="nearest",
                                         aspect="auto"))
            ax.set_xticks([]), ax.set_yticks([]), ax.grid(False)
            for spine in ax.spines.values():
                spine.set_visible(False)
            ax.set_title("KV cache after the step (one cell = one block)", loc="left", fontsize=9)
            ax = axes(left + 0.35, legend_h + 0.15, panel_w - 0.35, line_h - 0.1)
            self.cursors.append(draw_usage(ax, blocks, t_max))
        handles = [Patch(color=OWNER_COLORS[0], label="holding tokens (colour = request)"),
                   Patch(color=COLORS["idle"], label="owned, no token in it"),
                   Patch(color=COLORS["free"], label="free"),
                   Patch(facecolor="white", edgecolor=COLORS["preempt"], lw=2,
                         label="taken back by a preemption")]
        fig.legend(handles=handles, ncol=4 if n > 1 else 2, loc="lower left", fontsize=8,
                   bbox_to_anchor=(0.5 / width, 0.0), handlelength=1.2)

    def update(self, steps: list[int]) -> list[dict]:
        """Show step `steps[i]` of map i; return each panel's numbers."""
        numbers = []
        for i, (blocks, k) in enumerate(zip(self.maps, steps)):
            image = block_image(blocks.owners[k], blocks.tokens[k], blocks.block_size,
                                self.cols, self.px, blocks.lost(k))    # [rows*px, cols*px, 3]
            self.images[i].set_data(image)
            self.images[i].set_extent((-0.5, image.shape[1] - 0.5, image.shape[0] - 0.5, -0.5))
            self.images[i].axes.set_xlim(-0.5, self.cols * self.px - 0.5)
            self.images[i].axes.set_ylim(cdiv(self.max_blocks, self.cols) * self.px - 0.5, -0.5)
            self.cursors[i].set_xdata([blocks.trace.steps[k].end_time] * 2)
            nums = step_numbers(blocks, k)
            numbers.append(nums)
            self.titles[i].set_text(headline(nums))
        return numbers

    def png(self) -> bytes:
        return redraw_png(self.fig, self.dpi)


class KVBlockMap(CourseWidget):
    """Contiguous vs paged KV memory, side by side. `.widget`, controls, `.result`.

    Simulator mode (no `runs`): `.left` / `.right` (variant dropdowns), `.block_size`,
    `.num_kv_blocks`, `.max_tokens` (the clients' cap), `.num_requests`; changing any
    of them re-simulates `workload.chat_burst`. Always: `.step` (slider), `.play`,
    `.image` (PNG), `.numbers` (HTML). `runs`: {name: Trace with block tables, or BlockMap}.
    `sync="time"` shows both panels at the same moment, `"step"` at the same step.
    """

    def __init__(self, runs: dict | None = None, *, left: str = "static+contiguous",
                 right: str = "continuous+paged", block_size: int = 16,
                 num_kv_blocks: int = 128, max_tokens: int = 256, num_requests: int = 32,
                 max_num_seqs: int = 32, seed: int = 0, sync: str = "time"):
        import ipywidgets as w
        super().__init__()
        if sync not in ("time", "step"):
            raise ValueError(f"sync must be 'time' or 'step', got {sync!r}")
        self.simulated = runs is None
        self.max_num_seqs, self.seed, self.sync = max_num_seqs, seed, sync
        style = {"description_width": "110px"}
        names = list(VARIANTS)
        self.left = w.Dropdown(options=names, value=left, description="left panel", style=style)
        self.right = w.Dropdown(options=names, value=right, description="right panel", style=style)
        self.block_size = w.Dropdown(options=[1, 2, 4, 8, 16, 32, 64], value=block_size,
                                     description="block size", style=style)
        slider = dict(style=style, continuous_update=False)
        self.num_kv_blocks = w.IntSlider(value=num_kv_blocks, min=16, max=512, step=16,
                                         description="KV blocks", **slider)
        self.max_tokens = w.IntSlider(value=max_tokens, min=32, max=1024, step=32,
                                      description="max_tokens cap", **slider)
        self.num_requests = w.IntSlider(value=num_requests, min=4, max=96, step=4,
                                        description="requests", **slider)
        self.step = w.IntSlider(value=0, min=0, max=1, description="step",
                                layout=w.Layout(width="520px"), **slider)
        self.play = w.Play(value=0, min=0, max=1, interval=300, description="play")
        w.link((self.play, "value"), (self.step, "value"))
        self.image = w.Image(format="png")
        self.numbers = w.HTML()
        self.config_controls = [self.left, self.right, self.block_size, self.num_kv_blocks,
                                self.max_tokens, self.num_requests]
        rows = []
        if self.simulated:
            self._simulate()
            for c in self.config_controls:
                c.observe(self._on_config, names="value")
            rows = [w.HBox([self.left, self.right, self.block_size]),
                    w.HBox([self.num_kv_blocks, self.max_tokens, self.num_requests])]
        else:
            self.runs = [as_block_map(v, k) for k, v in runs.items()]
            self._new_figure()
        self.step.observe(self.on_change, names="value")
        self.widget = w.VBox([*rows, w.HBox([self.play, self.step]), self.numbers, self.image])
        self.update()

    def workload(self) -> list[RequestSpec]:
        return chat_burst(self.num_requests.value, self.max_tokens.value, self.seed)

    def _simulate(self) -> None:
        start = time.perf_counter()
        workload = self.workload()
        kwargs = dict(block_size=self.block_size.value, max_num_seqs=self.max_num_seqs,
                      num_kv_blocks=self._num_blocks(workload), record_block_tables=True)
        self.runs = [block_map(simulate(workload, scheduling=v, max_steps=100_000, **kwargs), v)
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
        self.ends = [[s.end_time for s in m.trace.steps] for m in self.runs]
        self.moments = sorted({t for ends in self.ends for t in ends})
        if self.sync == "step" or len(self.runs) == 1:
            last = max(m.num_steps for m in self.runs) - 1
        else:
            last = len(self.moments) - 1
        with self.quiet():
            self.play.max = self.step.max = last      # clamps the value: no redraw yet

    def _on_config(self, _change) -> None:
        self._simulate()
        self.update()

    def panel_steps(self, index: int) -> list[int]:
        """Which step each panel shows for slider value `index`.

        sync="step" (or one panel): step `index` of every run (its last step once a run
        is over). sync="time": the slider walks every run's step ends in time order,
        and each panel shows its latest step that ended by then — both panels at the
        same moment, so a faster run visibly finishes first.
        """
        if self.sync == "step" or len(self.runs) == 1:
            return [min(index, m.num_steps - 1) for m in self.runs]
        t = self.moments[index]
        return [max(0, bisect.bisect_right(ends, t) - 1) for ends in self.ends]

    def update(self) -> dict:
        start = time.perf_counter()
        index = self.step.value
        steps = self.panel_steps(index)
        panels = self.figure.update(steps)
        self.image.value = self.figure.png()
        self.result = {"step": index, "panel_steps": steps,
                       "panels": {p["name"]: p for p in panels},
                       "left": panels[0], "right": panels[-1],
                       "draw_seconds": time.perf_counter() - start}
        self.numbers.value = numbers_html(panels)
        return self.result
