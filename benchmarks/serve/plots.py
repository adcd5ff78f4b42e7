"""Pictures of a rate sweep: latency percentiles against the offered request rate."""

from __future__ import annotations

from minillm.widgets.style import COLORS

LINE_COLORS = {"static": COLORS["static"], "continuous": COLORS["continuous"],
               "chunked": COLORS["chunked"]}


def plain_log_axes(ax, xticks) -> None:
    """Log axes labelled 0.62, 1.6, 4.1 and 200, 500, 1000 instead of 6x10^-1."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter
    ax.xaxis.set_major_locator(FixedLocator(xticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}"))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(NullFormatter())


def plot_sweep(sweeps: dict[str, list[dict]], unloaded: dict | None = None,
               capacities: dict[str, float] | None = None, title: str = ""):
    """TTFT and ITL against the offered rate: P50 (solid), P99 (dashed) per configuration.

    `unloaded` (the summary of one-request-at-a-time runs) is drawn dotted; `capacities`
    (requests/s each configuration completes when it never runs dry) as vertical lines:
    the knee of a queue, past which arrivals outpace service and the wait keeps growing.
    """
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
            if capacities and config in capacities:
                ax.axvline(capacities[config], color=color, lw=0.8, alpha=0.6)
        if unloaded:
            ax.axhline(unloaded[f"median_{name}_ms"], color=COLORS["text"], ls=":", lw=1,
                       label="one at a time (P50)")
        ax.set(xlabel="offered request rate (requests/s, Poisson)\nvertical lines: capacity",
               ylabel=f"{label} (ms, log scale)", yscale="log", xscale="log",
               title=f"{label} measured at the client")
        plain_log_axes(ax, sorted({s["request_rate"] for rows in sweeps.values() for s in rows
                                   if s["request_rate"] != float("inf")}))
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
