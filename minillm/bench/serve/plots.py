"""Pictures of a rate sweep: latency percentiles against the offered request rate."""

from __future__ import annotations

from minillm.widgets.style import COLORS

LINE_COLORS = {"static": COLORS["static"], "continuous": COLORS["continuous"],
               "chunked": COLORS["chunked"]}


def knee(summaries: list[dict], metric: str = "median_ttft_ms", factor: float = 2.0):
    """The lowest rate whose `metric` is over `factor` × its value at the lowest rate —
    where queueing takes over (None if it never does in the sweep). The median, not the
    P99: with a few requests per rate, the P99 is one unlucky request."""
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
        ax.set(xlabel="offered request rate (requests/s, Poisson)", ylabel=f"{label} (ms, log)",
               yscale="log", xscale="log", title=f"{label} measured at the client")
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_arrivals(arrivals: list[tuple[float, str]], title: str = ""):
    """Tokens of one streamed answer over time: a step per chunk, TTFT marked."""
    import matplotlib.pyplot as plt
    times = [1e3 * t for t, _ in arrivals]
    fig, (ax, gaps) = plt.subplots(1, 2, figsize=(10, 3.2))
    ax.step([0] + times, range(len(times) + 1), where="post", color=COLORS["decode"])
    ax.axvline(times[0], color=COLORS["prefill"], ls="--", lw=1)
    ax.annotate(f" TTFT {times[0]:.0f} ms", (times[0], len(times) * 0.8), color=COLORS["prefill"])
    ax.set(xlabel="ms since the request was sent", ylabel="chunks received",
           title=title or "one streamed answer, seen by the client")
    gaps.plot(range(1, len(times)), [b - a for a, b in zip(times, times[1:])], "o-",
              color=COLORS["decode"], ms=3)
    gaps.set(xlabel="chunk number", ylabel="gap to the previous chunk (ms)",
             title="inter-token latency (ITL)", ylim=(0, None))
    fig.tight_layout()
    return fig
