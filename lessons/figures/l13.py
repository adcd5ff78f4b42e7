"""Pictures of lesson 13: your engine beside the answer key's, on the same workload.

* `plot_side_by_side` — throughput, TTFT and ITL percentiles, slot and KV use of two runs
  (each a `minillm.sim.metrics.summarize` dict), one bar per engine;
* `plot_batch_over_time` — the batch slots and KV blocks each engine used, step by step.

The lesson computes every number; these functions only draw them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from minillm.widgets.style import COLORS

PANELS = (("generated tokens/s", [("generated_tokens_per_s", "", 1)]),
          ("TTFT (ms)", [("ttft_p50", "P50", 1e3), ("ttft_p99", "P99", 1e3)]),
          ("ITL (ms)", [("itl_p50", "P50", 1e3), ("itl_p99", "P99", 1e3)]),
          ("use", [("slot_utilization", "slots", 100), ("kv_utilization", "KV", 100)]))


def plot_side_by_side(summaries: dict[str, dict], title: str) -> None:
    """One panel per measure, one bar colour per engine (`summaries`: name → summarize())."""
    fig, axes = plt.subplots(1, len(PANELS), figsize=(13, 3.2))
    colours = [COLORS["decode"], COLORS["prefill"], COLORS["idle"]]
    width = 0.8 / len(summaries)
    for ax, (label, keys) in zip(axes, PANELS):
        x = np.arange(len(keys))
        for i, (name, summary) in enumerate(summaries.items()):
            values = [summary[key] * scale for key, _, scale in keys]
            ax.bar(x + i * width, values, width, label=name, color=colours[i % len(colours)])
        ax.set_xticks(x + width * (len(summaries) - 1) / 2, [sub for _, sub, _ in keys])
        ax.set_title(label + (" (%)" if label == "use" else ""))
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()


def plot_batch_over_time(traces: dict[str, object]) -> None:
    """Running sequences and KV blocks in use at every step of each engine's run."""
    fig, (slots, blocks) = plt.subplots(1, 2, figsize=(12, 3))
    for (name, trace), colour in zip(traces.items(), [COLORS["decode"], COLORS["prefill"]]):
        start = trace.steps[0].start_time
        t = [s.end_time - start for s in trace.steps]
        slots.step(t, [len(s.scheduled) for s in trace.steps], where="post", label=name,
                   color=colour)
        blocks.step(t, [s.kv_blocks_used for s in trace.steps], where="post", label=name,
                    color=colour)
    slots.set(title="sequences in the step", xlabel="seconds since the first step")
    blocks.set(title="KV blocks in use", xlabel="seconds since the first step")
    slots.legend(fontsize=8)
    fig.tight_layout()
