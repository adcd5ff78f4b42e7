"""The slot-waste explorer: how many batch slots do useful work, static vs continuous.

    from minillm.widgets.slot_waste import SlotWasteExplorer
    SlotWasteExplorer()                              # sliders, runs on the simulator
    SlotWasteExplorer(preset="seed")                 # the seed article's 8-slot example
    SlotWasteExplorer.from_trace(llm.trace)          # draw a real-model Trace
    SlotWasteExplorer.from_trace({"static": t1, "continuous": t2})

The picture is a grid, one row per batch slot and one column per engine iteration:

    blue   prefill      the slot runs a prompt (the request's first iteration)
    green  decode       the slot produces one token
    pale red  idle      a finished request still holds the slot (static batching)
    grey   empty        no request in the slot: nothing was waiting to fill it

The numbers beside it: idle % (= 1 − useful slot-iterations / all slot-iterations,
split into "held by a finished row" and "empty"), throughput, and end-to-end and
first-token latency P50 / P99.

Controls: slots (`max_num_seqs`), number of requests, output-length distribution
(kind, median, spread), arrivals (all at once, or Poisson at a rate), and which
policy to show (static, continuous, or both side by side). Every change re-runs the
workload through the *real* schedulers on the simulated runner (`minillm.simulate`):
times are simulated seconds from the cost model (SmolLM2-135M on a 2-core CPU by
default), token counts and slot decisions are exactly what the engine would do.

A Trace does not record *which* slot a request sits in — a slot is one of the
`max_num_seqs` rows of the batch. `slot_layout` assigns them the natural way: a request
keeps its slot from the iteration it joins until it leaves, a newcomer takes the
lowest free slot.
"""

from __future__ import annotations

import time

import numpy as np

from minillm.metrics import summarize
from minillm.trace import Trace
from minillm.widgets.style import COLORS, figure_png
from minillm.workload import SEED_OUTPUT_LENS, LengthDist, RequestSpec, arrival_times

# cell states of the grid, in the order of the colour table
EMPTY, PREFILL, DECODE, IDLE = range(4)
STATE_LABELS = ("empty (nothing to run)", "prefill", "decode (1 token)",
                "idle (finished, still holding the slot)")
STATE_COLORS = (COLORS["free"], COLORS["prefill"], COLORS["decode"], COLORS["idle"])

DISTRIBUTIONS = ("seed lengths", "fixed", "uniform", "lognormal", "pareto")
POLICIES = ("static vs continuous", "static", "continuous")
ARRIVALS = ("all at once", "poisson")
PROMPT_LEN = 32               # every simulated prompt; slot accounting does not depend on it
CAP_FACTOR = 16               # outputs are capped at 16 × the median (and at MAX_OUTPUT)
MAX_OUTPUT = 1024


# ---------------------------------------------------------------------- workloads

def length_dist(kind: str, median: int, spread: float) -> LengthDist:
    """An output-length distribution with the given median and spread (0 = none).

    fixed: always `median`. uniform: [median·(1 − spread/2), median·(1 + spread/2)].
    lognormal: sigma = spread. pareto: tail index alpha = 2 / spread (spread 1 →
    alpha 2, spread 2 → alpha 1: the heaviest tail), scaled so its median is `median`.
    Every kind is capped at CAP_FACTOR × median (at most MAX_OUTPUT).
    """
    cap = int(min(CAP_FACTOR * median, MAX_OUTPUT))
    if kind == "fixed" or spread <= 0:
        return LengthDist("fixed", value=int(median))
    if kind == "uniform":
        low = max(1, round(median * (1 - spread / 2)))
        return LengthDist("uniform", low=low, high=max(low, round(median * (1 + spread / 2))))
    if kind == "lognormal":
        return LengthDist("lognormal", median=float(median), sigma=float(spread), cap=cap)
    if kind == "pareto":
        alpha = 2.0 / spread
        return LengthDist("pareto", minimum=median / 2 ** (1 / alpha), alpha=alpha, cap=cap)
    raise ValueError(f"kind must be one of {DISTRIBUTIONS[1:]}, got {kind!r}")


def output_lengths(kind: str, num_requests: int, median: int = 48, spread: float = 1.0,
                   seed: int = 0) -> list[int]:
    """`num_requests` output lengths; "seed lengths" repeats 30, 40, …, 700, …, 100."""
    if kind == "seed lengths":
        return [SEED_OUTPUT_LENS[i % len(SEED_OUTPUT_LENS)] for i in range(num_requests)]
    rng = np.random.default_rng(seed)
    return length_dist(kind, median, spread).sample(rng, num_requests).tolist()


def make_requests(lengths: list[int], arrival: str = "all at once", rate: float = 2.0,
                  seed: int = 0) -> list[RequestSpec]:
    """One RequestSpec per length; max_tokens = the length (the client knows it exactly)."""
    kind = "poisson" if arrival == "poisson" else "burst"
    times = arrival_times(np.random.default_rng(seed + 1), len(lengths), kind, rate)
    return [RequestSpec(f"req-{i}", PROMPT_LEN, int(n), int(n), float(t))
            for i, (n, t) in enumerate(zip(lengths, times))]


def simulate_policy(requests: list[RequestSpec], scheduling: str, num_slots: int) -> Trace:
    """Run the requests through the real scheduler on the simulated runner."""
    from minillm.simulate import simulate
    return simulate(requests, scheduling=scheduling, max_num_seqs=num_slots)


# ---------------------------------------------------------------------- trace → grid

def slot_layout(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(states, owners), both [num_slots, num_steps], for a Trace.

    states: EMPTY / PREFILL / DECODE / IDLE per slot and step; owners: the index (in
    order of first appearance) of the request in that slot, -1 for an empty slot.
    A request keeps its slot while it appears in a step (scheduled, or idle in a
    static batch); the slot is freed at the first step it is absent; a newcomer takes
    the lowest free slot.
    """
    num_slots = max((s.num_slots for s in trace.steps), default=0)
    slot_of: dict[str, int] = {}
    index_of: dict[str, int] = {}
    cells = []                                           # (step, slot, state, owner)
    for t, step in enumerate(trace.steps):
        states = {e.request_id: PREFILL if e.num_prefill_tokens else DECODE
                  for e in step.scheduled}
        states.update({rid: IDLE for rid in step.idle})
        for rid in [r for r in slot_of if r not in states]:
            del slot_of[rid]                             # it left the batch
        for rid, state in states.items():
            if rid not in slot_of:
                taken = set(slot_of.values())
                slot_of[rid] = next(i for i in range(len(states) + num_slots) if i not in taken)
            owner = index_of.setdefault(rid, len(index_of))
            cells.append((t, slot_of[rid], state, owner))
    height = max([num_slots] + [slot + 1 for _, slot, _, _ in cells])
    states_grid = np.full((height, len(trace.steps)), EMPTY, dtype=np.int8)
    owners = np.full((height, len(trace.steps)), -1, dtype=np.int64)
    for t, slot, state, owner in cells:
        states_grid[slot, t], owners[slot, t] = state, owner
    return states_grid, owners


def slot_grid(trace: Trace) -> np.ndarray:
    """States [num_slots, num_steps] (EMPTY / PREFILL / DECODE / IDLE) of a Trace."""
    return slot_layout(trace)[0]


def trace_numbers(trace: Trace) -> dict:
    """The numbers the explorer shows for one Trace (times in the trace's seconds)."""
    s = summarize(trace)
    held = sum(len(step.idle) for step in trace.steps)
    total = s["slot_steps"]
    return {
        "num_requests": s["num_requests"],
        "iterations": s["num_steps"],
        "slot_iterations": total,
        "useful": s["busy_slot_steps"],
        "idle_fraction": 1 - s["slot_utilization"] if total else float("nan"),
        "held_idle_fraction": held / total if total else float("nan"),
        "empty_fraction": (total - s["busy_slot_steps"] - held) / total if total else float("nan"),
        "duration_s": s["duration_s"],
        "tokens_per_s": s["generated_tokens_per_s"],
        "e2e_p50": s["e2e_p50"], "e2e_p99": s["e2e_p99"],
        "ttft_p50": s["ttft_p50"], "ttft_p99": s["ttft_p99"],
    }


# ---------------------------------------------------------------------- drawing

def draw_slot_grids(traces: dict[str, Trace], title: str | None = None):
    """One slots × iterations panel per Trace, stacked, sharing the iteration axis.

    A thin white tick marks where one request hands its slot to the next.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    layouts = {name: slot_layout(t) for name, t in traces.items()}
    heights = [max(states.shape[0], 1) for states, _ in layouts.values()]
    fig, axes = plt.subplots(len(layouts), 1, sharex=True, squeeze=False,
                             figsize=(9.5, 1.0 + sum(0.8 + min(0.17 * h, 2.8) for h in heights)),
                             gridspec_kw={"height_ratios": [0.8 + min(0.17 * h, 2.8) for h in heights]})
    cmap = ListedColormap(STATE_COLORS)
    width = max([states.shape[1] for states, _ in layouts.values()] + [1])
    for ax, (name, (states, owners)) in zip(axes[:, 0], layouts.items()):
        n = trace_numbers(traces[name])
        slots, steps = states.shape
        ax.imshow(states, cmap=cmap, vmin=0, vmax=len(STATE_COLORS) - 1, aspect="auto",
                  interpolation="nearest", extent=(0, steps, slots - 0.5, -0.5))
        # hand-overs: the owner changes between two occupied neighbouring steps
        change = (owners[:, 1:] != owners[:, :-1]) & (owners[:, 1:] >= 0) & (owners[:, :-1] >= 0)
        slot_idx, step_idx = np.nonzero(change)
        ax.vlines(step_idx + 1, slot_idx - 0.45, slot_idx + 0.45, colors="white", linewidth=1.2)
        ax.set_xlim(0, width)
        ax.set_ylabel("slot")
        ax.grid(False)
        ax.set_yticks(range(0, slots, max(1, int(np.ceil(slots / 8)))))
        ax.set_title(f"{name}: {n['iterations']} iterations, {n['idle_fraction']:.1%} idle "
                     f"({n['held_idle_fraction']:.1%} held by finished rows, "
                     f"{n['empty_fraction']:.1%} empty)", loc="left")
    axes[-1, 0].set_xlabel("iteration (engine step)")
    handles = [Patch(facecolor=c, edgecolor="#999999", label=label)
               for c, label in zip(STATE_COLORS, STATE_LABELS)]
    fig.legend(handles=handles, loc="upper center", ncol=4, bbox_to_anchor=(0.5, 1.0),
               fontsize=8)
    if title:
        fig.suptitle(title, y=1.05)
    top = 1 - 0.55 / fig.get_figheight()          # room for the legend (tight_layout is slow)
    fig.subplots_adjust(left=0.06, right=0.99, top=top, bottom=0.5 / fig.get_figheight() + 0.02,
                        hspace=0.9 / fig.get_figheight() * len(layouts))
    return fig


def numbers_html(numbers: dict[str, dict], unit: str = "simulated s") -> str:
    """A small HTML table: one column per policy."""
    rows = [("requests", "num_requests", "{:d}"), ("iterations", "iterations", "{:d}"),
            ("idle slot-iterations", "idle_fraction", "{:.1%}"),
            ("&nbsp;&nbsp;held by finished rows", "held_idle_fraction", "{:.1%}"),
            ("&nbsp;&nbsp;empty", "empty_fraction", "{:.1%}"),
            ("throughput (tokens/s)", "tokens_per_s", "{:.1f}"),
            (f"E2E latency P50 ({unit})", "e2e_p50", "{:.2f}"),
            (f"E2E latency P99 ({unit})", "e2e_p99", "{:.2f}"),
            (f"TTFT P50 ({unit})", "ttft_p50", "{:.2f}"),
            (f"TTFT P99 ({unit})", "ttft_p99", "{:.2f}")]
    head = "".join(f"<th style='padding:0 10px'>{name}</th>" for name in numbers)
    body = ""
    for label, key, fmt in rows:
        cells = "".join(f"<td style='text-align:right;padding:0 10px'>{_fmt(fmt, n[key])}</td>"
                        for n in numbers.values())
        body += f"<tr><td>{label}</td>{cells}</tr>"
    return f"<table><tr><th></th>{head}</tr>{body}</table>"


def _fmt(fmt: str, value) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    return fmt.format(value)


# ---------------------------------------------------------------------- the widget

class SlotWasteExplorer:
    """Sliders → simulated static / continuous runs → slots × iterations chart + numbers.

    `.widget` is the ipywidgets box (displaying the explorer shows it); the controls
    are attributes (`slots`, `requests`, `distribution`, `median`, `spread`,
    `arrival`, `rate`, `policy`, `seed`, `preset`); `.result` holds what is on
    screen: one dict of numbers per policy shown, plus "update_seconds".
    `.traces` holds the Traces behind the picture.
    """

    def __init__(self, *, num_slots: int = 8, num_requests: int = 24,
                 distribution: str = "lognormal", median: int = 48, spread: float = 1.0,
                 arrival: str = "all at once", rate: float = 2.0,
                 policy: str = "static vs continuous", seed: int = 0,
                 preset: str | None = None, trace=None, title: str | None = None):
        self.title = title
        self.fixed_traces = _as_trace_dict(trace) if trace is not None else None
        self.result: dict = {}
        self.traces: dict[str, Trace] = {}
        self._busy = False
        self._build_controls(num_slots, num_requests, distribution, median, spread,
                             arrival, rate, policy, seed)
        if preset == "seed":
            self.apply_seed_preset()
        else:
            self.update()

    def _build_controls(self, num_slots, num_requests, distribution, median, spread,
                        arrival, rate, policy, seed) -> None:
        import ipywidgets as W

        style = {"description_width": "110px"}
        self.slots = W.IntSlider(value=num_slots, min=1, max=32, description="slots",
                                 style=style)
        self.requests = W.IntSlider(value=num_requests, min=1, max=96, description="requests",
                                    style=style)
        self.distribution = W.Dropdown(options=DISTRIBUTIONS, value=distribution,
                                       description="output lengths", style=style)
        self.median = W.IntSlider(value=median, min=4, max=128, description="median length",
                                  style=style)
        self.spread = W.FloatSlider(value=spread, min=0.0, max=2.0, step=0.1,
                                    description="spread", style=style)
        self.arrival = W.Dropdown(options=ARRIVALS, value=arrival, description="arrivals",
                                  style=style)
        self.rate = W.FloatSlider(value=rate, min=0.2, max=20.0, step=0.2,
                                  description="rate (req/s)", style=style)
        self.policy = W.Dropdown(options=POLICIES, value=policy, description="policy",
                                 style=style)
        self.seed = W.IntText(value=seed, description="seed", style=style,
                              layout={"width": "200px"})
        self.preset = W.Button(description="seed example (8 slots)", icon="undo",
                               tooltip="8 slots, outputs 30, 40, 50, 60, 700, 80, 90, 100")
        self.preset.on_click(lambda _: self.apply_seed_preset())
        self.image = W.Image(format="png")
        self.numbers = W.HTML()
        controls = [self.slots, self.requests, self.distribution, self.median, self.spread,
                    self.arrival, self.rate, self.policy, self.seed]
        for control in controls:
            control.observe(self._on_change, names="value")
        if self.fixed_traces is None:
            panel = W.VBox(controls + [self.preset], layout={"min_width": "330px"})
            self.widget = W.VBox([W.HBox([panel, self.numbers]), self.image])
        else:                                   # a recorded Trace: nothing to control
            self.widget = W.VBox([self.numbers, self.image])

    @classmethod
    def from_trace(cls, trace, title: str | None = None) -> "SlotWasteExplorer":
        """Draw a recorded Trace (or a {name: Trace} dict, one panel each); no controls."""
        return cls(trace=trace, title=title)

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)

    # ------------------------------------------------------------------ updating
    def apply_seed_preset(self) -> None:
        """The seed article's example: 8 slots, 8 requests, outputs 30 … 700 … 100."""
        self._busy = True
        try:
            self.slots.value, self.requests.value = 8, 8
            self.distribution.value, self.arrival.value = "seed lengths", "all at once"
        finally:
            self._busy = False
        self.update()

    def _on_change(self, _change) -> None:
        if not self._busy:
            self.update()

    def update(self) -> dict:
        """Recompute (simulate, unless showing fixed traces), redraw, return `.result`."""
        start = time.perf_counter()
        self._sync_enabled()
        if self.fixed_traces is not None:
            self.traces = self.fixed_traces
        else:
            lengths = output_lengths(self.distribution.value, self.requests.value,
                                     self.median.value, self.spread.value, self.seed.value)
            requests = make_requests(lengths, self.arrival.value, self.rate.value,
                                     self.seed.value)
            names = {"static vs continuous": ("static", "continuous")}.get(
                self.policy.value, (self.policy.value,))
            self.traces = {name: simulate_policy(requests, name, self.slots.value)
                           for name in names}
        numbers = {name: trace_numbers(t) for name, t in self.traces.items()}
        simulated = all(t.config.get("runner") == "sim" for t in self.traces.values())
        unit = "simulated s" if simulated else "s"
        self.numbers.value = numbers_html(numbers, unit)
        self.image.value = figure_png(draw_slot_grids(self.traces, self.title))
        self.result = {**numbers, "update_seconds": time.perf_counter() - start}
        return self.result

    def _sync_enabled(self) -> None:
        seed_lengths = self.distribution.value == "seed lengths"
        self.median.disabled = seed_lengths
        self.spread.disabled = seed_lengths or self.distribution.value == "fixed"
        self.rate.disabled = self.arrival.value != "poisson"


def _as_trace_dict(trace) -> dict[str, Trace]:
    if isinstance(trace, Trace):
        return {trace.config.get("scheduling", "trace"): trace}
    if isinstance(trace, dict) and all(isinstance(t, Trace) for t in trace.values()):
        return dict(trace)
    raise TypeError("trace must be a Trace or a {name: Trace} dict")
