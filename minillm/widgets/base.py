"""What every course widget shares.

A widget is a small class: `.widget` is the ipywidgets box (displaying the object shows
it), the controls are attributes, and `.result` holds the numbers it currently shows, so
a test can move a control and check what was recomputed. `CourseWidget` gives that
shape once, plus `quiet()` (set several controls, recompute once) and `html_table`
(the numbers beside the picture).
"""

from __future__ import annotations

import html
import math
from abc import ABC, abstractmethod
from contextlib import contextmanager


class CourseWidget(ABC):
    """Base class: `.widget`, `.result`, display in Jupyter, one update per change.

    A subclass builds its controls, observes them with `self.on_change`, lays them out
    in `self.widget` and implements `update()`, which recomputes, redraws and returns
    `self.result`.
    """

    widget = None

    def __init__(self) -> None:
        self.result: dict = {}
        self._busy = False

    @abstractmethod
    def update(self) -> dict:
        """Recompute from the controls, redraw, and return `self.result`."""

    def on_change(self, _change=None) -> None:
        """A control moved: recompute, unless a `quiet()` block is setting several."""
        if not self._busy:
            self.update()

    @contextmanager
    def quiet(self):
        """Change several controls without an update after each one (`with self.quiet(): …`)."""
        busy, self._busy = self._busy, True
        try:
            yield
        finally:
            self._busy = busy

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


def format_number(fmt: str, value, scale: float = 1) -> str:
    """`fmt.format(value * scale)`, or "—" for a missing number (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return fmt.format(value * scale if scale != 1 else value)


def html_table(columns: dict[str, dict], rows: list[tuple]) -> str:
    """A small HTML table: one column per `columns` entry (name → numbers), one row per
    `(label, key, fmt)` or `(label, key, fmt, scale)` in `rows`."""
    head = "".join(f"<th style='padding:0 10px'>{html.escape(name)}</th>" for name in columns)
    body = ""
    for label, key, fmt, *scale in rows:
        cells = "".join(f"<td style='text-align:right;padding:0 10px'>"
                        f"{format_number(fmt, numbers[key], *scale)}</td>"
                        for numbers in columns.values())
        body += f"<tr><td>{label}</td>{cells}</tr>"
    return f"<table><tr><th></th>{head}</tr>{body}</table>"
