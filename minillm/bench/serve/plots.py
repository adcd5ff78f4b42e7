"""Pictures of a rate sweep: latency percentiles against the offered request rate."""

from __future__ import annotations

from minillm.widgets.style import COLORS

LINE_COLORS = {"static": COLORS["static"], "continuous": COLORS["continuous"],
               "chunked": COLORS["chunked"]}


def knee(summaries: list[dict], metric: str = "p99_ttft_ms", factor: float = 3.0):
    """The lowest rate whose `metric` is over `factor` × its value at the lowest rate —
    where queueing takes over (None if it never does in the sweep)."""
    finite = [s for s in summaries if s["request_rate"] != float("inf") and s.get(metric)]
    if not finite:
        return None
    base = finite[0][metric]
    return next((s["request_rate"] for s in finite if s[metric] > factor * base), None)


def plot_sweep(sweeps: dict[str, list[dict]], title: str = ""):
    """One panel for TTFT, one for ITL: P50 (solid) and P99 (dashed) per configuration."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, name, label in ((axes[0], "ttft", "TTFT"), (axes[1], "itl", "ITL")):
        for i, (config, summaries) in enumerate(sweeps.items()):
            rows = [s for s in summaries if s["request_rate"] != float("inf")]
            color = LINE_COLORS.get(config, f"C{i}")
            rates = [s["request_rate"] for s in rows]
            ax.plot(rates, [s[f"median_{name}_ms"] for s in rows], "o-", color=color,
                    label=f"{config} P50")
            ax.plot(rates, [s[f"p99_{name}_ms"] for s in rows], "s--", color=color,
                    label=f"{config} P99")
            k = knee(summaries)
            if name == "ttft" and k is not None:
                ax.axvline(k, color=color, lw=0.8, alpha=0.5)
        ax.set(xlabel="offered request rate (requests/s, Poisson)", ylabel=f"{label} (ms)",
               yscale="log", title=f"{label} measured at the client")
    axes[1].legend(fontsize=7, ncol=2)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
