"""One look for every chart in the course: colours with a meaning, and PNG rendering.

Colours keep their meaning across lessons: prefill work is blue, decode work green,
idle (wasted) slots and memory grey-red, preemption orange, waiting requests purple.
"""

from __future__ import annotations

import io

import matplotlib

COLORS = {
    "prefill": "#4C72B0",     # blue: prompt tokens being processed
    "decode": "#55A868",      # green: one new token per step
    "idle": "#E5B8B7",        # pale red: a slot or a block reserved but doing nothing
    "free": "#F2F2F2",        # light grey: nothing there
    "preempt": "#DD8452",     # orange: preemption
    "waiting": "#8172B3",     # purple: requests in the queue
    "static": "#C44E52",      # red: the static-batching line in comparisons
    "continuous": "#55A868",  # green: the continuous-batching line
    "chunked": "#4C72B0",     # blue: continuous + chunked prefill
    "text": "#333333",
}

RC = {
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "font.size": 10,
}


def use_course_style() -> None:
    """Apply the course's matplotlib settings (call once per notebook)."""
    matplotlib.rcParams.update(RC)


def figure_png(fig) -> bytes:
    """Render a one-off figure to PNG bytes (for an ipywidgets.Image) and close it."""
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def redraw_png(fig, dpi: int) -> bytes:
    """Render a figure that a widget keeps and updates in place: one Agg render, no
    `bbox_inches="tight"` (that renders twice); the layout is fixed by hand instead."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
