"""The engine stepper: replay a Trace one engine step at a time.

    from minillm.widgets.stepper import EngineStepper
    EngineStepper(llm.trace)            # a real-model run …
    EngineStepper(simulate(workload))   # … or a simulated one: the same Trace format

At each step the picture shows

* **batch slots × steps** — every slot's history (prefill blue, decode green, a
  finished row that still holds its slot pale red, an empty slot grey), with a cursor
  on the current step;
* **this step** — which request sits in which slot and how many tokens it runs;
* **the waiting queue** — requests that have arrived by the step's start and are not in
  the batch, in arrival order (the Trace's `num_waiting` also counts requests whose arrival
  time is still in the future, so with timed arrivals the two differ);
* **the KV block map** — blocks in use (grouped by the request that holds them; the
  Trace records how many blocks each step uses, not their physical ids), blocks
  reserved but still empty (a static batch's worst-case reservation), free blocks.

A Trace does not say which *slot* a request occupies — a slot is just "one of the
`max_num_seqs` rows of the batch". The stepper assigns them the natural way: a request
keeps its slot from the step it joins until it leaves (finishes, or is preempted), and
a newcomer takes the lowest free slot. So when a request emits EOS you see its slot
refilled by the head of the queue at the very next step (continuous batching), or sit
idle until the whole batch ends (static batching).

Everything is computed once by `replay(trace)` (pure Python, no drawing); moving the
slider only redraws, so the widget answers in a fraction of a second.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np

from minillm.kv_cache import cdiv
from minillm.trace import Trace
from minillm.widgets.style import COLORS

# slot states, in the order of the timeline's colour table
EMPTY, PREFILL, DECODE, IDLE, HELD = range(5)
STATE_NAMES = ("empty", "prefill", "decode", "idle", "held")
STATE_COLORS = (COLORS["free"], COLORS["prefill"], COLORS["decode"], COLORS["idle"], "#B8B8B8")
STATE_LABELS = {PREFILL: "prefill", DECODE: "decode", IDLE: "finished, slot idle",
                HELD: "in batch, no work", EMPTY: "empty slot"}
KV_USED = ("#5B6C8F", "#8E9CBD")      # two shades so neighbouring owners stay apart
KV_UNKNOWN = "#9A9A9A"                 # used blocks the replay cannot attribute
MAX_QUEUE_SHOWN = 20


@dataclass
class SlotView:
    """One batch slot at one step."""

    slot: int
    request_id: str | None = None
    state: int = EMPTY
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    context_len: int = 0                # tokens in the KV cache after the step
    tokens_generated: int = 0           # this request's output tokens so far

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]


@dataclass
class StepView:
    """Everything the stepper shows for one step (numbers straight from the Trace)."""

    index: int
    start_time: float
    end_time: float
    slots: list[SlotView]
    running: list[str]                  # scheduled this step, in slot order
    idle: list[str]                     # finished rows still holding a slot (static)
    preempted: list[str]
    waiting: list[str]                  # arrived, not in the batch after the step
    num_prefill_tokens: int
    num_decode_tokens: int
    tokens_generated: int               # all requests, by the end of this step
    kv_blocks_used: int
    kv_blocks_free: int
    kv_owners: list[tuple[str, int, int]] = field(default_factory=list)  # (id, blocks, tokens)
    kv_blocks_unattributed: int = 0

    @property
    def queue_length(self) -> int:
        return len(self.waiting)

    @property
    def num_kv_blocks(self) -> int:
        return self.kv_blocks_used + self.kv_blocks_free


# ---------------------------------------------------------------------- replay

def replay(trace: Trace) -> list[StepView]:
    """Turn a Trace into one StepView per step (slot assignment, queue, KV owners)."""
    if not trace.steps:
        raise ValueError("the trace has no steps: run something first")
    requests = trace.requests
    block_size = trace.config.get("block_size") or 1
    static = trace.config.get("scheduling") == "static"
    all_token_times = sorted(t for r in requests.values() for t in r.token_times)
    order = {rid: k for k, rid in enumerate(requests)}      # the order requests were added
    arrivals = sorted(requests.values(), key=lambda r: (r.arrival_time, order[r.request_id]))

    slot_of: dict[str, int] = {}            # resident request -> its slot
    context: dict[str, int] = {}            # last known context length per request
    views = []
    for i, step in enumerate(trace.steps):
        scheduled = {e.request_id: e for e in step.scheduled}
        present = set(scheduled) | set(step.idle)
        # who stays: still in the batch, or resident and neither finished nor preempted
        for rid in list(slot_of):
            gone = (_finished_by(requests.get(rid), step.start_time) or rid in step.preempted)
            if rid not in present and gone:
                del slot_of[rid]
        for rid in [e.request_id for e in step.scheduled] + list(step.idle):
            if rid not in slot_of:
                slot_of[rid] = _lowest_free(slot_of.values())
        for rid, e in scheduled.items():
            context[rid] = e.context_len

        slots = _slot_views(step, slot_of, scheduled, context, requests)
        nxt = trace.steps[i + 1] if i + 1 < len(trace.steps) else None
        holders = [rid for rid in slot_of
                   if not _finished_by(requests.get(rid), step.end_time)
                   or (nxt is not None and rid in nxt.idle)]
        owners, unknown = _kv_owners(step, holders, context, requests, block_size, static)
        in_batch = set(slot_of)
        waiting = [r.request_id for r in arrivals
                   if r.arrival_time <= step.start_time and r.request_id not in in_batch
                   and not _finished_by(r, step.start_time)]
        views.append(StepView(
            index=step.index, start_time=step.start_time, end_time=step.end_time, slots=slots,
            running=[s.request_id for s in slots if s.state in (PREFILL, DECODE)],
            idle=list(step.idle), preempted=list(step.preempted), waiting=waiting,
            num_prefill_tokens=step.num_prefill_tokens, num_decode_tokens=step.num_decode_tokens,
            tokens_generated=bisect.bisect_right(all_token_times, step.end_time),
            kv_blocks_used=step.kv_blocks_used, kv_blocks_free=step.kv_blocks_free,
            kv_owners=owners, kv_blocks_unattributed=unknown))
    return views


def _finished_by(record, t: float) -> bool:
    return record is not None and record.finish_time is not None and record.finish_time <= t


def _lowest_free(taken) -> int:
    taken = set(taken)
    slot = 0
    while slot in taken:
        slot += 1
    return slot


def _slot_views(step, slot_of, scheduled, context, requests) -> list[SlotView]:
    num_slots = max([step.num_slots, *(s + 1 for s in slot_of.values())])
    slots = [SlotView(k) for k in range(num_slots)]
    for rid, k in slot_of.items():
        view = slots[k]
        view.request_id, view.context_len = rid, context.get(rid, 0)
        record = requests.get(rid)
        if record is not None:      # output tokens produced by the end of this step
            view.tokens_generated = bisect.bisect_right(record.token_times, step.end_time)
        e = scheduled.get(rid)
        if e is not None:
            view.num_prefill_tokens, view.num_decode_tokens = e.num_prefill_tokens, e.num_decode_tokens
            view.state = PREFILL if e.num_prefill_tokens else DECODE
        else:
            view.state = IDLE if rid in step.idle else HELD
    return slots


def _kv_owners(step, holders, context, requests, block_size, static):
    """Blocks per holder: paged = ceil(context / block_size); static = its reservation.

    Returns (owners, unattributed): if the estimate does not add up to the Trace's
    `kv_blocks_used` (a scheduler that allocates differently), the difference is shown
    as "used, owner unknown" instead of being made up.
    """
    def reservation(rid):
        r = requests.get(rid)
        return cdiv(r.prompt_len + r.max_tokens, block_size) if r else 0

    paged = [(rid, cdiv(context.get(rid, 0), block_size), context.get(rid, 0)) for rid in holders]
    reserved = [(rid, reservation(rid), context.get(rid, 0)) for rid in holders]
    for owners in ((reserved, paged) if static else (paged, reserved)):
        if sum(b for _, b, _ in owners) == step.kv_blocks_used:
            return owners, 0
    owners = reserved if static else paged
    total = sum(b for _, b, _ in owners)
    if total > step.kv_blocks_used:
        return [], step.kv_blocks_used
    return owners, step.kv_blocks_used - total


# ---------------------------------------------------------------------- drawing

def slot_states(views: list[StepView]) -> np.ndarray:
    """State code per (slot, step): an int array [num_slots, num_steps]."""
    num_slots = max(len(v.slots) for v in views)
    grid = np.full((num_slots, len(views)), EMPTY, dtype=np.int8)
    for j, v in enumerate(views):
        for s in v.slots:
            grid[s.slot, j] = s.state
    return grid


def _rgb(grid: np.ndarray) -> np.ndarray:
    from matplotlib.colors import to_rgb
    table = np.array([to_rgb(c) for c in STATE_COLORS])          # [5, 3]
    return table[grid]                                            # [slots, steps, 3]


def draw_slot_timeline(ax, trace_or_views, title: str | None = None, cursor: int | None = None):
    """Slots × steps chart of a Trace (or of its `replay`) on `ax`; returns the state grid."""
    views = trace_or_views if isinstance(trace_or_views, list) else replay(trace_or_views)
    grid = slot_states(views)
    ax.imshow(_rgb(grid), aspect="auto", interpolation="nearest",
              extent=(-0.5, grid.shape[1] - 0.5, grid.shape[0] - 0.5, -0.5))
    ax.set_xlabel("engine step")
    ax.set_ylabel("batch slot")
    ax.set_yticks(range(grid.shape[0]))
    ax.grid(False)
    if grid.shape[0] > 12:
        ax.set_yticks(range(0, grid.shape[0], max(1, grid.shape[0] // 8)))
    if cursor is not None:
        ax.axvline(cursor, color=COLORS["text"], lw=1.5)
    if title:
        ax.set_title(title, loc="left")
    return grid


def short_id(request_id: str) -> str:
    """'req-7' or 'ab12cd34-7' (llm.generate's ids) → 'r7'; other ids are cut to 8 chars."""
    head, _, tail = request_id.rpartition("-")
    if head and tail.isdigit():
        return "r" + tail
    return request_id[:8]


def _snapshot_text(s: SlotView) -> str:
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


def kv_map_colors(view: StepView, block_size: int) -> list[str]:
    """One colour per block: owners' blocks (holding tokens / reserved empty), then free."""
    cells = []
    for k, (rid, blocks, tokens) in enumerate(view.kv_owners):
        holding = min(blocks, cdiv(tokens, block_size))
        cells += [KV_USED[k % 2]] * holding + [COLORS["idle"]] * (blocks - holding)
    cells += [KV_UNKNOWN] * view.kv_blocks_unattributed
    cells += [COLORS["free"]] * (view.num_kv_blocks - len(cells))
    return cells[:view.num_kv_blocks]


def _kv_image(colors: list[str], cols: int, rows: int, px: int) -> np.ndarray:
    """The block map as an RGB image [rows*px, cols*px, 3], a white line around each block."""
    from matplotlib.colors import to_rgb
    lut = {c: to_rgb(c) for c in set(colors)}
    cells = np.ones((rows * cols, 3))
    if colors:
        cells[:len(colors)] = [lut[c] for c in colors]
    image = np.repeat(np.repeat(cells.reshape(rows, cols, 3), px, axis=0), px, axis=1)
    if px >= 3:
        image[px - 1::px, :, :] = 1.0
        image[:, px - 1::px, :] = 1.0
    return image


class StepperFigure:
    """The stepper's picture, built once; `png(index)` updates it and renders PNG bytes.

    Only data changes between steps (the cursor, texts, colours, two images), so a
    redraw costs one Agg render — a small fraction of a second — not a new figure.
    Axes are placed in inches by hand; no `bbox_inches="tight"` (a second render).
    """

    WIDTH = 11.0          # inches; panels: timeline + queue on the left, snapshot + KV right

    def __init__(self, views: list[StepView], block_size: int, title: str = "", dpi: int = 90):
        from matplotlib.figure import Figure
        self.views, self.block_size, self.dpi = views, block_size, dpi
        self.num_slots = max(len(v.slots) for v in views)
        slots_h = max(1.3, 0.3 * self.num_slots)
        #          legend   KV / queue   gap    slot panels   header
        self.height = 0.4 + 1.0 + 0.55 + slots_h + 0.95
        self.fig = Figure(figsize=(self.WIDTH, self.height), dpi=dpi)
        self.fig.text(0.65 / self.WIDTH, 1 - 0.25 / self.height, title or "engine stepper",
                      fontsize=11, weight="bold", va="center")
        self.headline = self.fig.text(0.65 / self.WIDTH, 1 - 0.52 / self.height, "",
                                      fontsize=9.5, va="center")
        self._build_timeline(self._axes(0.65, 1.95, 6.55, slots_h))
        self._build_snapshot(self._axes(7.45, 1.95, 3.45, slots_h))
        self._build_queue(self._axes(0.65, 0.4, 6.55, 0.7))
        self._build_kv(self._axes(7.45, 0.4, 3.45, 1.0))
        self._build_legend()

    def _axes(self, left, bottom, width, height):
        """New axes at a position given in inches."""
        w, h = self.WIDTH, self.height
        return self.fig.add_axes((left / w, bottom / h, width / w, height / h))

    # ------------------------------------------------------------------ built once
    def _build_timeline(self, ax) -> None:
        draw_slot_timeline(ax, self.views, title="batch slots × engine steps")
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
        n = self.views[0].num_kv_blocks
        self.kv_cols = int(min(64, max(8, math.ceil(math.sqrt(3 * n)))))   # a wide grid
        self.kv_rows = cdiv(n, self.kv_cols)
        self.kv_px = 6 if self.kv_cols <= 32 else 2                          # pixels per block
        self.kv_image = ax.imshow(_kv_image([], self.kv_cols, self.kv_rows, self.kv_px),
                                  aspect="auto", interpolation="nearest")
        ax.set_xticks([]), ax.set_yticks([]), ax.grid(False)
        self.kv_title = ax.set_title("", loc="left")

    def _build_legend(self) -> None:
        from matplotlib.patches import Patch
        handles = [Patch(color=STATE_COLORS[s], label=t) for s, t in STATE_LABELS.items()]
        handles += [Patch(color=COLORS["waiting"], label="waiting"),
                    Patch(color=KV_USED[0], label="KV block in use"),
                    Patch(color=COLORS["idle"], label="KV reserved, empty")]
        self.fig.legend(handles=handles, ncol=len(handles), loc="lower left", fontsize=7.5,
                        bbox_to_anchor=(0.55 / self.WIDTH, 0.02), handlelength=1.2,
                        columnspacing=1.0)

    # ------------------------------------------------------------------ per step
    def update(self, index: int) -> None:
        view = self.views[index]
        self.cursor.set_xdata([index, index])
        self.headline.set_text(_headline(view, len(self.views)))
        by_slot = {s.slot: s for s in view.slots}
        for k, (bar, text) in enumerate(zip(self.slot_bars, self.slot_texts)):
            s = by_slot.get(k, SlotView(k))
            bar.set_color(STATE_COLORS[s.state])
            text.set_text(_snapshot_text(s))
            text.set_color("white" if s.state in (PREFILL, DECODE) else COLORS["text"])
        self.queue_title.set_text(f"waiting queue: {view.queue_length}"
                                  + ("" if view.waiting else "  (empty)"))
        for k, (box, text) in enumerate(zip(self.queue_boxes, self.queue_texts)):
            shown = k < len(view.waiting)
            box.set_visible(shown)
            text.set_text(short_id(view.waiting[k]) if shown else "")
        extra = view.queue_length - MAX_QUEUE_SHOWN
        self.queue_more.set_text(f"+{extra}" if extra > 0 else "")
        colors = kv_map_colors(view, self.block_size)
        self.kv_image.set_data(_kv_image(colors, self.kv_cols, self.kv_rows, self.kv_px))
        unknown = (f", {view.kv_blocks_unattributed} owner unknown"
                   if view.kv_blocks_unattributed else "")
        self.kv_title.set_text(f"KV after the step: {view.kv_blocks_used}/{view.num_kv_blocks}"
                               f" blocks used{unknown}")

    def png(self, index: int) -> bytes:
        import io
        self.update(index)
        buffer = io.BytesIO()
        self.fig.savefig(buffer, format="png", dpi=self.dpi)
        return buffer.getvalue()


def _headline(view: StepView, num_steps: int) -> str:
    text = (f"step {view.index} of {num_steps - 1}  ·  t = {view.end_time:.3f} s  ·  "
            f"running {len(view.running)} ({view.num_prefill_tokens} prefill + "
            f"{view.num_decode_tokens} decode tokens)  ·  idle {len(view.idle)}  ·  "
            f"waiting {view.queue_length}  ·  tokens generated {view.tokens_generated}")
    if view.preempted:
        text += f"  ·  preempted: {', '.join(short_id(r) for r in view.preempted)}"
    return text


def render_step(views: list[StepView], index: int, block_size: int, title: str = "") -> bytes:
    """One step's picture as PNG bytes (builds a fresh StepperFigure; fine for one-offs)."""
    return StepperFigure(views, block_size, title).png(index)


# ---------------------------------------------------------------------- the widget

class EngineStepper:
    """Play / step through a Trace. `.widget` is the box, `.result` the numbers shown.

    Controls: `.play` (ipywidgets.Play), `.slider` (the step), `.back_button`,
    `.step_button`. `.image` holds the PNG of the current step.
    """

    def __init__(self, trace: Trace, title: str = "", interval_ms: int = 400):
        import ipywidgets as w
        self.trace = trace
        self.views = replay(trace)
        self.block_size = trace.config.get("block_size") or 1
        self.title = title
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
        self.result: dict = {}
        self.figure = StepperFigure(self.views, self.block_size, title)
        self.slider.observe(lambda change: self._show(change["new"]), names="value")
        controls = w.HBox([self.play, self.back_button, self.step_button, self.slider])
        self.widget = w.VBox([controls, self.info, self.image])
        self._show(0)

    def go(self, index: int) -> None:
        """Move to step `index` (clamped to the trace)."""
        self.slider.value = max(0, min(len(self.views) - 1, int(index)))

    def _show(self, index: int) -> None:
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
        }
        self.info.value = (
            f"<b>step {view.index}</b> of {len(self.views) - 1} · running "
            f"{len(view.running)} · idle {len(view.idle)} · waiting {view.queue_length} · "
            f"tokens generated {view.tokens_generated} · KV blocks "
            f"{view.kv_blocks_used}/{view.num_kv_blocks}"
            + (f" · <span style='color:{COLORS['preempt']}'>preempted: "
               f"{', '.join(view.preempted)}</span>" if view.preempted else ""))
        self.image.value = self.figure.png(index)

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)
