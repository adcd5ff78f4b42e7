"""The engine stepper: replay a Trace one engine step at a time.

    from minillm.widgets.stepper import EngineStepper
    EngineStepper(llm.trace)            # LLM(..., record_block_tables=True): a real run …
    EngineStepper(simulate(workload, record_block_tables=True))   # … or a simulated one

At each step the picture shows

* **batch slots × steps** — every slot's history (the slot grid of `draw.py`), with a
  cursor on the current step;
* **this step** — which request sits in which slot and how many tokens it runs;
* **the waiting queue** — requests that have arrived by the step's start and are not in
  the batch, in arrival order;
* **the KV block map** — the cache after the step, one cell per physical block, coloured
  by the request that holds it (pale red: reserved, no token in it yet), read from the
  Trace's block tables.

Slots follow the one rule of `layout.py`: a request keeps its slot from the step it
joins until it leaves, a newcomer takes the lowest free slot. So when a request emits
EOS you see its slot refilled by the head of the queue at the very next step
(continuous batching), or sit idle until the whole batch ends (static batching).

Everything is computed once (`layout.replay`, `layout.block_map`); moving the slider
only redraws.
"""

from __future__ import annotations

import math

import numpy as np

from minillm.engine.trace import Trace
from minillm.widgets.base import CourseWidget
from minillm.widgets.draw import (OWNER_COLORS, STATE_COLORS, STATE_LABELS, block_image,
                                  draw_slot_grid)
from minillm.widgets.layout import (DECODE, IDLE, PREFILL, SlotView, StepView, block_map,
                                    replay, short_id)
from minillm.widgets.style import COLORS, redraw_png

MAX_QUEUE_SHOWN = 20


def snapshot_text(s: SlotView) -> str:
    """One line of the "this step" panel."""
    if s.request_id is None:
        return "empty"
    name = short_id(s.request_id)
    if s.state == PREFILL:
        return f"{name}  prefill {s.num_prefill_tokens} tokens"
    if s.state == DECODE:
        return f"{name}  decode → token {s.tokens_generated}"
    if s.state == IDLE:
        return f"{name}  finished ({s.tokens_generated} tokens), idle"
    return f"{name}  in the batch, no work this step"


def headline(view: StepView, num_steps: int) -> str:
    text = (f"step {view.index} of {num_steps - 1}  ·  t = {view.end_time:.3f} s  ·  "
            f"running {len(view.running)} ({view.num_prefill_tokens} prefill + "
            f"{view.num_decode_tokens} decode tokens)  ·  idle {len(view.idle)}  ·  "
            f"waiting {view.queue_length}  ·  tokens generated {view.tokens_generated}")
    if view.preempted:
        text += f"  ·  preempted: {', '.join(short_id(r) for r in view.preempted)}"
    return text


class StepperFigure:
    """The stepper's picture, built once; `png(index)` updates it and renders PNG bytes.

    Only data changes between steps (the cursor, texts, colours, the block map), so a
    redraw is one Agg render, not a new figure. Axes are placed in inches by hand; no
    `bbox_inches="tight"` (a second render).
    """

    WIDTH = 11.0          # inches; panels: timeline + queue on the left, snapshot + KV right

    def __init__(self, trace: Trace, views: list[StepView], blocks, title: str = "",
                 dpi: int = 90):
        from matplotlib.figure import Figure
        self.views, self.blocks, self.dpi = views, blocks, dpi
        self.num_slots = max(len(v.slots) for v in views)
        slots_h = max(1.3, 0.3 * self.num_slots)
        #          legend   KV / queue   gap    slot panels   header
        self.height = 0.4 + 1.0 + 0.55 + slots_h + 0.95
        self.fig = Figure(figsize=(self.WIDTH, self.height), dpi=dpi)
        self.fig.text(0.65 / self.WIDTH, 1 - 0.25 / self.height, title or "engine stepper",
                      fontsize=11, weight="bold", va="center")
        self.headline = self.fig.text(0.65 / self.WIDTH, 1 - 0.52 / self.height, "",
                                      fontsize=9.5, va="center")
        self._build_timeline(self._axes(0.65, 1.95, 6.55, slots_h), trace)
        self._build_snapshot(self._axes(7.45, 1.95, 3.45, slots_h))
        self._build_queue(self._axes(0.65, 0.4, 6.55, 0.7))
        self._build_kv(self._axes(7.45, 0.4, 3.45, 1.0))
        self._build_legend()

    def _axes(self, left, bottom, width, height):
        """New axes at a position given in inches."""
        w, h = self.WIDTH, self.height
        return self.fig.add_axes((left / w, bottom / h, width / w, height / h))

    def _build_timeline(self, ax, trace) -> None:
        draw_slot_grid(ax, trace)
        ax.set_title("batch slots × engine steps", loc="left")
        ax.set_xlabel("engine step", labelpad=1)
        self.cursor = ax.axvline(0, color=COLORS["text"], lw=1.5)       # only this moves

    def _build_snapshot(self, ax) -> None:
        from matplotlib.patches import Rectangle
        n = self.num_slots
        ax.set_xlim(0, 1), ax.set_ylim(n - 0.5, -0.5), ax.axis("off")
        ax.set_title("this step", loc="left")
        fontsize = 9 if n <= 10 else max(5, 9 - (n - 10) // 3)
        self.slot_bars = [ax.add_patch(Rectangle((0, k - 0.42), 1, 0.84, lw=0)) for k in range(n)]
        self.slot_texts = [ax.text(0.03, k, "", va="center", fontsize=fontsize) for k in range(n)]

    def _build_queue(self, ax) -> None:
        from matplotlib.patches import Rectangle
        ax.axis("off"), ax.set_xlim(0, MAX_QUEUE_SHOWN + 2.5), ax.set_ylim(-0.7, 0.7)
        self.queue_title = ax.set_title("", loc="left")
        self.queue_boxes = [ax.add_patch(Rectangle((k + 0.05, -0.4), 0.9, 0.8,
                                                   color=COLORS["waiting"], lw=0))
                            for k in range(MAX_QUEUE_SHOWN)]
        self.queue_texts = [ax.text(k + 0.5, 0, "", ha="center", va="center", fontsize=7,
                                    color="white") for k in range(MAX_QUEUE_SHOWN)]
        self.queue_more = ax.text(MAX_QUEUE_SHOWN + 0.2, 0, "", va="center", fontsize=9)

    def _build_kv(self, ax) -> None:
        n = self.blocks.num_blocks
        self.kv_cols = int(min(64, max(8, math.ceil(math.sqrt(3 * n)))))   # a wide grid
        self.kv_px = 6 if self.kv_cols <= 32 else 2                          # pixels per block
        self.kv_image = ax.imshow(self._kv(0), aspect="auto", interpolation="nearest")
        ax.set_xticks([]), ax.set_yticks([]), ax.grid(False)
        self.kv_title = ax.set_title("", loc="left")

    def _kv(self, index: int):
        b = self.blocks
        return block_image(b.owners[index], b.tokens[index], b.block_size, self.kv_cols,
                           self.kv_px, b.lost(index))               # [rows*px, cols*px, 3]

    def _build_legend(self) -> None:
        from matplotlib.patches import Patch
        handles = [Patch(color=STATE_COLORS[s], label=t.split(" (")[0])
                   for s, t in STATE_LABELS.items()]
        handles += [Patch(color=COLORS["waiting"], label="waiting"),
                    Patch(color=OWNER_COLORS[0], label="KV block (colour = request)"),
                    Patch(color=COLORS["idle"], label="KV reserved, empty")]
        self.fig.legend(handles=handles, ncol=len(handles), loc="lower left", fontsize=7.5,
                        bbox_to_anchor=(0.55 / self.WIDTH, 0.02), handlelength=1.2,
                        columnspacing=1.0)

    def update(self, index: int) -> None:
        view = self.views[index]
        self.cursor.set_xdata([index, index])
        self.headline.set_text(headline(view, len(self.views)))
        by_slot = {s.slot: s for s in view.slots}
        for k, (bar, text) in enumerate(zip(self.slot_bars, self.slot_texts)):
            s = by_slot.get(k, SlotView(k))
            bar.set_color(STATE_COLORS[s.state])
            text.set_text(snapshot_text(s))
            text.set_color("white" if s.state in (PREFILL, DECODE) else COLORS["text"])
        self.queue_title.set_text(f"waiting queue: {view.queue_length}"
                                  + ("" if view.waiting else "  (empty)"))
        for k, (box, text) in enumerate(zip(self.queue_boxes, self.queue_texts)):
            shown = k < len(view.waiting)
            box.set_visible(shown)
            text.set_text(short_id(view.waiting[k]) if shown else "")
        extra = view.queue_length - MAX_QUEUE_SHOWN
        self.queue_more.set_text(f"+{extra}" if extra > 0 else "")
        self.kv_image.set_data(self._kv(index))
        self.kv_title.set_text(f"KV after the step: {view.kv_blocks_used}/{view.num_kv_blocks}"
                               " blocks used")

    def png(self, index: int) -> bytes:
        self.update(index)
        return redraw_png(self.fig, self.dpi)


class EngineStepper(CourseWidget):
    """Play / step through a Trace recorded with `record_block_tables=True`.

    Controls: `.play` (ipywidgets.Play), `.slider` (the step), `.back_button`,
    `.step_button`; `.image` holds the PNG of the current step, `.result` its numbers.
    A Trace without block tables raises ValueError (it cannot say who holds which block).
    """

    def __init__(self, trace: Trace, title: str = "", interval_ms: int = 400):
        import ipywidgets as w
        super().__init__()
        self.trace = trace
        self.blocks = block_map(trace)
        self.views = replay(trace)
        last = len(self.views) - 1
        self.play = w.Play(value=0, min=0, max=last, step=1, interval=interval_ms,
                           description="play")
        self.slider = w.IntSlider(value=0, min=0, max=last, description="step",
                                  continuous_update=False, layout=w.Layout(width="420px"))
        w.link((self.play, "value"), (self.slider, "value"))   # kernel-side: works everywhere
        self.back_button = w.Button(description="◀ Back", layout=w.Layout(width="90px"))
        self.step_button = w.Button(description="Step ▶", layout=w.Layout(width="90px"))
        self.back_button.on_click(lambda _: self.go(self.slider.value - 1))
        self.step_button.on_click(lambda _: self.go(self.slider.value + 1))
        self.image = w.Image(format="png")
        self.info = w.HTML()
        self.figure = StepperFigure(trace, self.views, self.blocks, title)
        self.slider.observe(self.on_change, names="value")
        controls = w.HBox([self.play, self.back_button, self.step_button, self.slider])
        self.widget = w.VBox([controls, self.info, self.image])
        self.update()

    def go(self, index: int) -> None:
        """Move to step `index` (clamped to the trace)."""
        self.slider.value = max(0, min(len(self.views) - 1, int(index)))

    def kv_blocks(self, index: int) -> dict[str, list[int]]:
        """`{request id: [physical blocks]}` the block map shows after step `index`."""
        owners = self.blocks.owners[index]                            # [num_blocks]
        held: dict[str, list[int]] = {}
        for block in np.flatnonzero(owners >= 0):
            held.setdefault(self.blocks.request_ids[owners[block]], []).append(int(block))
        return held

    def update(self) -> dict:
        index = self.slider.value
        view = self.views[index]
        self.result = {
            "step": view.index, "time": view.end_time,
            "running": list(view.running), "idle": list(view.idle),
            "preempted": list(view.preempted), "waiting": list(view.waiting),
            "queue_length": view.queue_length,
            "slots": {s.slot: s.request_id for s in view.slots},
            "slot_states": {s.slot: s.state_name for s in view.slots},
            "empty_slots": sum(s.request_id is None for s in view.slots),
            "prefill_tokens": view.num_prefill_tokens, "decode_tokens": view.num_decode_tokens,
            "tokens_generated": view.tokens_generated,
            "kv_blocks_used": view.kv_blocks_used, "kv_blocks_free": view.kv_blocks_free,
            "kv_blocks": self.kv_blocks(index),
        }
        self.info.value = (
            f"<b>step {view.index}</b> of {len(self.views) - 1} · running "
            f"{len(view.running)} · idle {len(view.idle)} · waiting {view.queue_length} · "
            f"tokens generated {view.tokens_generated} · KV blocks "
            f"{view.kv_blocks_used}/{view.num_kv_blocks}"
            + (f" · <span style='color:{COLORS['preempt']}'>preempted: "
               f"{', '.join(view.preempted)}</span>" if view.preempted else ""))
        self.image.value = self.figure.png(index)
        return self.result
