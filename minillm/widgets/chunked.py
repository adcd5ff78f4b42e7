"""Chunked-prefill explorer: how the token budget trades TTFT for smooth streaming.

    ChunkedPrefillExplorer()                       # simulator: decoders + long prompts arriving
    ChunkedPrefillExplorer(traces={"no chunking": t1, "chunked": t2})   # real Traces

The workload is the stutter scenario of lesson 06 (`workload.stutter_workload`): a few
requests stream their answers (steady decoders) while long prompts arrive one after
another. Without chunking, each long prompt is prefilled in ONE step that every decoder
has to wait for — a spike in their inter-token latency (ITL). With chunked prefill
(分块预填充, Sarathi-Serve) a step runs at most `budget` tokens: decodes first, then a
chunk of the prompt.

The picture:

* **timeline** — one row per request: waiting (purple) from arrival to its first step,
  then every step it ran in: prefill chunks blue, decode steps green;
* **ITL over time** — every gap between two tokens of a request, at the time of the
  later token; dashed lines mark the long prompts' arrivals;
* **distributions** — ITL (the spikes are the tail) and TTFT per request.

`.result` holds the numbers shown: P50/P99/max ITL, P50 TTFT, the long prompts' TTFT,
the biggest step (tokens and seconds), throughput, and the same for a run without
chunking (the reference) with the P99-ITL ratio.
"""

from __future__ import annotations

import time

import numpy as np

from minillm.engine.trace import Trace
from minillm.sim.metrics import completed_requests, percentiles, request_metrics
from minillm.sim.simulate import simulate
from minillm.sim.workload import RequestSpec, stutter_workload
from minillm.widgets.base import CourseWidget, html_table
from minillm.widgets.style import COLORS, figure_png


def simulate_stutter(workload: list[RequestSpec], chunked: bool, budget: int,
                     max_num_seqs: int = 16, **engine_kwargs) -> Trace:
    """Continuous batching, with chunked prefill at `budget` tokens a step or without it
    (then a step has no token budget below the model's context: prompts join whole)."""
    kwargs = dict(max_num_seqs=max_num_seqs, enable_chunked_prefill=chunked, **engine_kwargs)
    if chunked:
        kwargs["max_num_batched_tokens"] = budget
    return simulate(workload, scheduling="continuous", max_steps=200_000, **kwargs)


def itl_points(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(time of the later token [G], gap in seconds [G]) for every inter-token gap."""
    times, gaps = [], []
    for r in completed_requests(trace):
        if len(r.token_times) > 1:
            t = np.asarray(r.token_times)
            times.append(t[1:])
            gaps.append(np.diff(t))
    if not times:
        return np.array([]), np.array([])
    return np.concatenate(times), np.concatenate(gaps)


def trace_numbers(trace: Trace, long_prefix: str = "long") -> dict:
    """Everything the explorer prints about one Trace (seconds)."""
    m = request_metrics(trace)
    itl, ttft = percentiles(m["itl"], (50, 99)), percentiles(m["ttft"], (50, 99))
    long_ttft = [r.first_token_time - r.arrival_time for r in completed_requests(trace)
                 if r.request_id.startswith(long_prefix)]
    steps = [s for s in trace.steps if s.scheduled]
    duration = trace.duration
    generated = sum(r.output_len for r in trace.requests.values())
    return {
        "itl_p50": itl[50], "itl_p99": itl[99],
        "itl_max": float(m["itl"].max()) if m["itl"].size else float("nan"),
        "ttft_p50": ttft[50], "ttft_p99": ttft[99],
        "long_ttft_mean": float(np.mean(long_ttft)) if long_ttft else float("nan"),
        "max_step_tokens": max(s.num_batched_tokens for s in steps),
        "max_step_seconds": max(s.duration for s in steps),
        "num_steps": len(steps),
        "tokens_per_s": generated / duration if duration > 0 else float("nan"),
        "duration": duration,
    }


def draw_timeline(ax, trace: Trace, t_max: float | None = None) -> None:
    """One row per request: waiting, prefill chunks and decode steps over time."""
    records = sorted(trace.requests.values(), key=lambda r: (r.arrival_time, r.request_id))
    rows = {r.request_id: k for k, r in enumerate(records)}
    spans = {rid: {"prefill": [], "decode": []} for rid in rows}
    for s in trace.steps:
        for e in s.scheduled:
            kind = "prefill" if e.num_prefill_tokens else "decode"
            spans[e.request_id][kind].append((s.start_time, s.end_time - s.start_time))
    for r in records:
        y = rows[r.request_id]
        if r.first_scheduled_time is not None and r.first_scheduled_time > r.arrival_time:
            ax.broken_barh([(r.arrival_time, r.first_scheduled_time - r.arrival_time)],
                           (y - 0.3, 0.6), color=COLORS["waiting"], lw=0)
        for kind in ("decode", "prefill"):
            if spans[r.request_id][kind]:
                ax.broken_barh(spans[r.request_id][kind], (y - 0.38, 0.76),
                               color=COLORS[kind], lw=0)
    ax.set_yticks(range(len(records)))
    ax.set_yticklabels([r.request_id for r in records], fontsize=7)
    ax.set_ylim(len(records) - 0.5, -0.5)
    ax.set_xlim(0, t_max or trace.steps[-1].end_time)
    ax.set_xlabel("time (s)")
    ax.grid(False)


def draw_itl(ax, trace: Trace, t_max: float | None = None, long_prefix: str = "long") -> None:
    t, gaps = itl_points(trace)
    ax.scatter(t, gaps * 1000, s=6, color=COLORS["decode"], lw=0)
    if gaps.size:
        p99 = np.percentile(gaps, 99) * 1000
        ax.axhline(p99, color=COLORS["static"], lw=1, ls="--", label=f"P99 {p99:.0f} ms")
    for r in trace.requests.values():
        if r.request_id.startswith(long_prefix):
            ax.axvline(r.arrival_time, color=COLORS["waiting"], lw=1, ls=":")
    ax.set_xlim(0, t_max or trace.steps[-1].end_time)
    ax.set_ylim(0, None)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("inter-token gap (ms)")
    ax.legend(loc="upper right")


def draw_distributions(ax_itl, ax_ttft, trace: Trace, reference: Trace | None = None,
                       labels: tuple[str, str] = ("this run", "no chunking")) -> None:
    """ITL histogram (log count) and TTFT per request; the reference run in grey."""
    runs = [(trace, COLORS["chunked"], labels[0])]
    if reference is not None:
        runs.append((reference, "#9A9A9A", labels[1]))
    all_gaps = np.concatenate([request_metrics(t)["itl"] for t, _, _ in runs]) * 1000
    bins = np.linspace(0, max(all_gaps.max(), 1e-6) * 1.02, 40) if all_gaps.size else 10
    for t, color, label in runs[::-1]:
        gaps = request_metrics(t)["itl"] * 1000
        ax_itl.hist(gaps, bins=bins, color=color, alpha=0.75, label=label, log=True)
    ax_itl.set_xlabel("inter-token gap (ms)")
    ax_itl.set_ylabel("gaps (log)")
    ax_itl.legend(loc="upper right")
    ids = sorted(trace.requests, key=lambda k: (trace.requests[k].arrival_time, k))
    width = 0.4 if reference is not None else 0.8
    for offset, (t, color, label) in zip((0, width), runs):
        values = [(t.requests[k].first_token_time - t.requests[k].arrival_time)
                  if k in t.requests and t.requests[k].first_token_time is not None else 0.0
                  for k in ids]
        ax_ttft.bar(np.arange(len(ids)) + offset - (width / 2 if reference is not None else 0),
                    values, width=width, color=color, label=label)
    ax_ttft.set_xticks(range(len(ids)))
    ax_ttft.set_xticklabels(ids, rotation=60, fontsize=7)
    ax_ttft.set_ylabel("TTFT (s)")
    ax_ttft.legend(loc="upper left")


def draw_explorer(trace: Trace, reference: Trace | None, title: str,
                  ref_label: str = "no chunking"):
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(11, 6.6))
    grid = fig.add_gridspec(2, 2, height_ratios=(1.15, 1), hspace=0.5, wspace=0.22)
    t_max = max(t.steps[-1].end_time for t in ([trace, reference] if reference else [trace]))
    ax = fig.add_subplot(grid[0, 0])
    draw_timeline(ax, trace, t_max)
    ax.set_title("requests over time (waiting · prefill · decode)", loc="left")
    ax = fig.add_subplot(grid[0, 1])
    draw_itl(ax, trace, t_max)
    ax.set_title("every inter-token gap (dotted: a long prompt arrives)", loc="left")
    draw_distributions(fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1]), trace,
                       reference, ("this run", ref_label))
    fig.axes[2].set_title("ITL distribution", loc="left")
    fig.axes[3].set_title("time to first token, per request", loc="left")
    from matplotlib.patches import Patch
    handles = [Patch(color=COLORS["waiting"], label="waiting"),
               Patch(color=COLORS["prefill"], label="prefill (chunk)"),
               Patch(color=COLORS["decode"], label="decode step")]
    fig.legend(handles=handles, ncol=3, loc="upper right", bbox_to_anchor=(0.98, 1.0))
    fig.suptitle(title, x=0.06, ha="left", fontsize=11, weight="bold")
    return fig


class ChunkedPrefillExplorer(CourseWidget):
    """Token budget / chunking → timeline, ITL and TTFT. `.widget`, controls, `.result`.

    Simulator mode (`workload.stutter_workload`): `.chunking` (Checkbox), `.budget`
    (tokens per step), `.long_prompt` (tokens in each long prompt), `.num_decoders`.
    Trace mode (`traces={...}`): `.which` picks the Trace shown; the first one is the
    reference.
    """

    def __init__(self, traces: dict[str, Trace] | None = None, *, chunking: bool = True,
                 budget: int = 128, long_prompt: int = 1000, num_decoders: int = 6,
                 num_long: int = 3, cost_model=None):
        import ipywidgets as w
        super().__init__()
        self.simulated = traces is None
        self.cost_model, self.num_long = cost_model, num_long
        style = {"description_width": "120px"}
        slider = dict(style=style, continuous_update=False)
        self.chunking = w.Checkbox(value=chunking, description="chunked prefill", style=style)
        self.budget = w.IntSlider(value=budget, min=16, max=1024, step=16,
                                  description="token budget", **slider)
        self.long_prompt = w.IntSlider(value=long_prompt, min=100, max=4000, step=100,
                                       description="long prompt (tokens)", **slider)
        self.num_decoders = w.IntSlider(value=num_decoders, min=1, max=15,
                                        description="streaming requests", **slider)
        self.image = w.Image(format="png")
        self.numbers = w.HTML()
        if self.simulated:
            self.controls = [self.chunking, self.budget, self.long_prompt, self.num_decoders]
            for c in self.controls:
                c.observe(self.on_change, names="value")
            top = [w.HBox([self.chunking, self.budget]),
                   w.HBox([self.long_prompt, self.num_decoders])]
        else:
            if not traces:
                raise ValueError("traces must hold at least one Trace")
            self.traces = dict(traces)
            names = list(self.traces)
            self.which = w.Dropdown(options=names, value=names[-1], description="trace",
                                    style=style)
            self.which.observe(self.on_change, names="value")
            top = [self.which]
        self.widget = w.VBox([*top, self.numbers, self.image])
        self.update()

    def workload(self) -> list[RequestSpec]:
        return stutter_workload(num_decoders=self.num_decoders.value,
                                long_prompt=self.long_prompt.value, num_long=self.num_long)

    def _runs(self) -> tuple[Trace, Trace | None, str, str]:
        """(the Trace shown, the reference or None, their labels)."""
        if not self.simulated:
            names = list(self.traces)
            shown = self.which.value
            ref = names[0] if shown != names[0] else None
            return self.traces[shown], self.traces[ref] if ref else None, shown, ref or ""
        workload = self.workload()
        kw = {} if self.cost_model is None else {"cost_model": self.cost_model}
        reference = simulate_stutter(workload, False, self.budget.value, **kw)
        if not self.chunking.value:
            return reference, None, "no chunking (simulated)", ""
        trace = simulate_stutter(workload, True, self.budget.value, **kw)
        return (trace, reference, f"chunked prefill, budget {self.budget.value} (simulated)",
                "no chunking")

    def update(self) -> dict:
        start = time.perf_counter()
        if self.simulated:
            self.budget.disabled = not self.chunking.value
        trace, reference, label, ref_label = self._runs()
        numbers = trace_numbers(trace)
        ref_numbers = trace_numbers(reference) if reference is not None else None
        self.result = {**numbers, "label": label, "reference": ref_numbers,
                       "itl_p99_ratio": (ref_numbers["itl_p99"] / numbers["itl_p99"]
                                         if ref_numbers else float("nan"))}
        self.image.value = figure_png(draw_explorer(trace, reference, label,
                                                    ref_label or "reference"))
        self.numbers.value = numbers_html(label, numbers, ref_label, ref_numbers)
        self.result["update_seconds"] = time.perf_counter() - start
        return self.result


def numbers_html(label: str, n: dict, ref_label: str, ref: dict | None) -> str:
    """The table above the picture (this run, and the reference beside it) + the ratio."""
    columns = {label: n, **({ref_label: ref} if ref else {})}
    table = html_table(columns, [
        ("P50 inter-token latency", "itl_p50", "{:.0f} ms", 1000),
        ("P99 inter-token latency", "itl_p99", "{:.0f} ms", 1000),
        ("longest gap", "itl_max", "{:.0f} ms", 1000),
        ("P50 time to first token", "ttft_p50", "{:.2f} s"),
        ("long prompts' mean TTFT", "long_ttft_mean", "{:.2f} s"),
        ("biggest step (tokens)", "max_step_tokens", "{}"),
        ("longest step", "max_step_seconds", "{:.0f} ms", 1000),
        ("generated tokens / s", "tokens_per_s", "{:.1f}")])
    if not ref:
        return table
    return (f"{table}<p>P99 ITL without chunking ÷ with: "
            f"<b>{ref['itl_p99'] / n['itl_p99']:.1f}×</b></p>")
