"""The slot-waste explorer: how many batch slots do useful work, static vs continuous.

    from minillm.widgets.slot_waste import SlotWasteExplorer
    SlotWasteExplorer()                              # sliders, runs on the simulator
    SlotWasteExplorer(preset="seed")                 # the seed article's 8-slot example
    SlotWasteExplorer.from_trace(llm.trace)          # draw a real-model Trace
    SlotWasteExplorer.from_trace({"static": t1, "continuous": t2})

The picture is the slot grid (`draw.draw_slot_grids`), one row per batch slot and one
column per engine iteration: prefill blue, decode green, a finished request still
holding its slot pale red (static batching), an empty slot grey. Which request sits in
which slot follows the one rule of `layout.py`.

The numbers beside it (`layout.slot_numbers`): idle % (= 1 − useful slot-iterations /
all slot-iterations, split into "held by a finished row" and "empty"), throughput, and
end-to-end and first-token latency P50 / P99.

Controls: slots (`max_num_seqs`), number of requests, output-length distribution
(kind, median, spread), arrivals (all at once, or Poisson at a rate), and which
policy to show (static, continuous, or both side by side). Every change re-runs the
workload through the *real* schedulers on the simulated runner (`minillm.sim.simulate`):
times are simulated seconds from the cost model, token counts and slot decisions are
exactly what the engine would do.
"""

from __future__ import annotations

import time

import numpy as np

from minillm.engine.trace import Trace
from minillm.sim.simulate import simulate
from minillm.sim.workload import SEED_OUTPUT_LENS, LengthDist, RequestSpec, arrival_times
from minillm.widgets.base import CourseWidget, html_table
from minillm.widgets.draw import draw_slot_grids
from minillm.widgets.layout import slot_numbers
from minillm.widgets.style import figure_png

DISTRIBUTIONS = ("seed lengths", "fixed", "uniform", "lognormal", "pareto")
POLICIES = ("static vs continuous", "static", "continuous")
ARRIVALS = ("all at once", "poisson")
PROMPT_LEN = 32               # every simulated prompt; slot accounting does not depend on it
CAP_FACTOR = 16               # outputs are capped at 16 × the median (and at MAX_OUTPUT)
MAX_OUTPUT = 1024


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
    """`num_requests` output lengths; "seed lengths" repeats the seed example's 30, 40, …,
    700, …, 100 (`workload.SEED_OUTPUT_LENS`)."""
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


def numbers_html(numbers: dict[str, dict], unit: str = "simulated s") -> str:
    """The table beside the grids: one column per policy."""
    return html_table(numbers, [
        ("requests", "num_requests", "{:d}"), ("iterations", "iterations", "{:d}"),
        ("idle slot-iterations", "idle_fraction", "{:.1%}"),
        ("&nbsp;&nbsp;held by finished rows", "held_idle_fraction", "{:.1%}"),
        ("&nbsp;&nbsp;empty", "empty_fraction", "{:.1%}"),
        ("throughput (tokens/s)", "tokens_per_s", "{:.1f}"),
        (f"E2E latency P50 ({unit})", "e2e_p50", "{:.2f}"),
        (f"E2E latency P99 ({unit})", "e2e_p99", "{:.2f}"),
        (f"TTFT P50 ({unit})", "ttft_p50", "{:.2f}"),
        (f"TTFT P99 ({unit})", "ttft_p99", "{:.2f}")])


class SlotWasteExplorer(CourseWidget):
    """Sliders → simulated static / continuous runs → slot grids + numbers.

    The controls are attributes (`slots`, `requests`, `distribution`, `median`,
    `spread`, `arrival`, `rate`, `policy`, `seed`, `preset`); `.result` holds what is
    on screen: one dict of numbers per policy shown, plus "update_seconds". `.traces`
    holds the Traces behind the picture.
    """

    def __init__(self, *, num_slots: int = 8, num_requests: int = 24,
                 distribution: str = "lognormal", median: int = 48, spread: float = 1.0,
                 arrival: str = "all at once", rate: float = 2.0,
                 policy: str = "static vs continuous", seed: int = 0,
                 preset: str | None = None, trace=None, title: str | None = None):
        super().__init__()
        self.title = title
        self.fixed_traces = _as_trace_dict(trace) if trace is not None else None
        self.traces: dict[str, Trace] = {}
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
        self.slots = W.IntSlider(value=num_slots, min=1, max=32, description="slots", style=style)
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
        self.policy = W.Dropdown(options=POLICIES, value=policy, description="policy", style=style)
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
            control.observe(self.on_change, names="value")
        if self.fixed_traces is None:
            panel = W.VBox(controls + [self.preset], layout={"min_width": "330px"})
            self.widget = W.VBox([W.HBox([panel, self.numbers]), self.image])
        else:                                   # a recorded Trace: nothing to control
            self.widget = W.VBox([self.numbers, self.image])

    @classmethod
    def from_trace(cls, trace, title: str | None = None) -> "SlotWasteExplorer":
        """Draw a recorded Trace (or a {name: Trace} dict, one panel each); no controls."""
        return cls(trace=trace, title=title)

    def apply_seed_preset(self) -> None:
        """The seed article's example: 8 slots, 8 requests, outputs 30 … 700 … 100."""
        with self.quiet():
            self.slots.value, self.requests.value = 8, 8
            self.distribution.value, self.arrival.value = "seed lengths", "all at once"
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
            self.traces = {name: simulate(requests, scheduling=name, max_num_seqs=self.slots.value)
                           for name in names}
        numbers = {name: slot_numbers(t) for name, t in self.traces.items()}
        simulated = all(t.config.get("runner") == "sim" for t in self.traces.values())
        self.numbers.value = numbers_html(numbers, "simulated s" if simulated else "s")
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
