"""Pictures of lesson 09: who waits under each scheduling policy.

* `plot_aging_keys` — the aging argument in one picture: the effective priority of one
  waiting low-priority request and of urgent newcomers over time, computed by a policy's
  own key function, with the overtake horizon after which no newcomer gets ahead;
* `plot_wait_cdfs` — queue-time distributions per kind of request, one line per policy;
* `plot_class_waits` — queue time against arrival time for two priority classes;
* `plot_real_queue_times` — the real SmolLM2 run: queue time per request, per policy;
* `plot_tenant_ttft` — tenant B's TTFT distribution with and without a quota;
* `plot_pressure` — the four answers to a full KV cache, side by side.

The lesson computes every number; these functions only draw them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from minillm.engine.sequence import Sequence
from minillm.sampling_params import SamplingParams
from minillm.widgets.style import COLORS


def _request(priority: int, arrival: float, order: int) -> Sequence:
    seq = Sequence(f"r{order}", [1], SamplingParams(max_tokens=1), arrival_time=arrival,
                   priority=priority)
    seq.admission_order = order
    return seq


def plot_aging_keys(effective_priority, low_priority: int, aging_rate: float,
                    newcomer_arrivals: list[float], horizon: float, t_end: float) -> None:
    """Effective priority against time: one old low-priority request, urgent newcomers.

    `effective_priority(seq, now, aging_rate)` is the policy function under study (the
    answer key's or the learner's). Lower is more urgent, so the y axis points down:
    a line *above* another on screen ranks first. A newcomer's line starts at its arrival.
    """
    t = np.linspace(0.0, t_end, 200)
    old = _request(low_priority, 0.0, 0)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.plot(t, [effective_priority(old, x, aging_rate) for x in t], color=COLORS["waiting"],
            lw=3, label=f"waiting since t = 0, priority {low_priority}")
    for i, s in enumerate(newcomer_arrivals):
        newcomer, ts = _request(0, s, i + 1), t[t >= s]
        ahead = s < horizon
        ax.plot(ts, [effective_priority(newcomer, x, aging_rate) for x in ts], lw=1.6,
                color=COLORS["static"] if ahead else COLORS["continuous"],
                label=None if i not in (0, len(newcomer_arrivals) - 1) else
                ("urgent newcomer (priority 0): ranks ahead" if ahead else
                 "urgent newcomer (priority 0): ranks behind"))
        ax.plot([s], [0], "o", color=COLORS["static"] if ahead else COLORS["continuous"], ms=4)
    ax.axvspan(0, horizon, color=COLORS["idle"], alpha=0.25, lw=0)
    ax.axvline(horizon, color=COLORS["text"], ls=":", lw=1)
    ax.text(horizon, 0.97, f" overtake horizon\n gap / aging_rate = {horizon:g} s", va="top",
            fontsize=9, transform=ax.get_xaxis_transform())
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_ylabel("effective priority\n(lower = served first)")
    ax.set_title(f"Aging at {aging_rate:g} priority levels per second: parallel lines, so an "
                 "order once settled never flips", loc="left")
    ax.legend(loc="lower left", fontsize=8)
    plt.show()


def plot_wait_cdfs(waits: dict[str, dict[str, np.ndarray]], counts: dict[str, int]) -> None:
    """`waits[policy][kind]` = queue times; one panel per kind, one line per policy."""
    colours = [COLORS["static"], COLORS["chunked"], COLORS["continuous"], COLORS["waiting"]]
    kinds = list(counts)
    fig, axes = plt.subplots(1, len(kinds), figsize=(11, 3.6), sharey=True)
    for ax, kind in zip(axes, kinds):
        for (name, per_kind), colour in zip(waits.items(), colours):
            w = np.sort(per_kind[kind])
            ax.step(w, np.arange(1, len(w) + 1) / len(w), where="post", color=colour, lw=2,
                    label=name)
        ax.set_xlabel("queue time (simulated s)")
        ax.set_title(f"{kind} requests ({counts[kind]})", loc="left")
    axes[0].set_ylabel("fraction of requests")
    axes[-1].legend(loc="lower right")
    fig.suptitle("Who waits under each policy — rush hour on the simulator, 8 slots",
                 x=0.01, ha="left")
    plt.tight_layout()
    plt.show()


def plot_class_waits(points: dict[float, dict[str, tuple[np.ndarray, np.ndarray]]],
                     rush_end: float) -> None:
    """`points[aging_rate][cls]` = (arrival times, queue times); one panel per aging rate."""
    colours = {"chat": COLORS["chunked"], "batch": COLORS["preempt"]}
    fig, axes = plt.subplots(1, len(points), figsize=(11, 3.6), sharey=True)
    for ax, (rate, by_class) in zip(axes, points.items()):
        for cls, (arrivals, waits) in by_class.items():
            ax.scatter(arrivals, waits, s=10, color=colours[cls],
                       label=f"{cls} (priority {int(cls == 'batch')})")
        ax.axvspan(0, rush_end, color=COLORS["idle"], alpha=0.25, lw=0)
        ax.set_xlabel("arrival time (simulated s; shaded: the rush)")
        ax.set_title(f"aging_rate = {rate:g} priority levels/s", loc="left")
    axes[0].set_ylabel("queue time (s)")
    axes[0].legend(loc="upper left")
    plt.tight_layout()
    plt.show()


def plot_real_queue_times(queue: dict[str, list[float]], lengths: list[int]) -> None:
    """Bars: queue time of each real request, one colour per policy."""
    colours = [COLORS["static"], COLORS["chunked"]]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    x = np.arange(len(lengths))
    for k, ((policy, q), colour) in enumerate(zip(queue.items(), colours)):
        ax.bar(x + (k - 0.5) * 0.38, q, width=0.38, color=colour, label=policy)
    ax.set_xticks(x, [f"#{i}\n{n} tok" for i, n in enumerate(lengths)])
    ax.set_ylabel("queue time (s, wall clock)")
    ax.set_title("SmolLM2, 2 slots: queue time per request (real run)", loc="left")
    ax.legend()
    plt.show()


def plot_tenant_ttft(ttfts: dict[str, np.ndarray]) -> None:
    """CDF of tenant B's TTFT, one line per scheduler."""
    colours = [COLORS["static"], COLORS["continuous"]]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for (name, ttft), colour in zip(ttfts.items(), colours):
        ttft = np.sort(ttft)
        ax.step(ttft, np.arange(1, len(ttft) + 1) / len(ttft), where="post", color=colour,
                lw=2, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("tenant B's time to first token (simulated s, log scale)")
    ax.set_ylabel("fraction of B's requests")
    ax.set_title("A tenant quota protects the small tenant (simulator)", loc="left")
    ax.legend()
    plt.show()


def plot_pressure(rows: dict[str, dict]) -> None:
    """Four bar panels: throughput, TTFT P99, E2E P99 (log), goodput; one bar per option."""
    names = list(rows)
    colours = [COLORS["waiting"], COLORS["preempt"], COLORS["chunked"], COLORS["static"]]
    panels = [("generated_tokens_per_s", "throughput (tokens/s)", 1),
              ("p99_ttft_s", "TTFT P99 (s, log)", 1), ("p99_e2e_s", "E2E latency P99 (s, log)", 1),
              ("goodput_fraction", "goodput (% of requests)", 100)]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    for ax, (key, label, scale) in zip(axes, panels):
        values = [rows[n][key] * scale for n in names]
        ax.bar(range(len(names)), values, color=colours[:len(names)])
        ax.set_xticks(range(len(names)), [n.split(" (")[0].replace(" ", "\n") for n in names],
                      fontsize=8)
        ax.set_title(label, loc="left")
        if "log" in label:
            ax.set_yscale("log")
            ax.set_ylim(max(min(values) / 3, 1e-2), max(values) * 3)
            ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        for x, v in enumerate(values):
            ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
    fig.suptitle("Four answers to a full KV cache — same workload, simulator", x=0.01, ha="left")
    plt.tight_layout()
    plt.show()
