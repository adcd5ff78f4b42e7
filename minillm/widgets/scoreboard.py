"""Scoreboard (lesson 13): whose part runs where in your engine, and what checks it.

    from minillm.widgets.scoreboard import Scoreboard
    Scoreboard(statuses, task_results, checks)

* `statuses`: `minillm.engine.components.learner_parts(...)` — per part: yours, the
  answer key's (and why), or not used in this run;
* `task_results`: the `TaskResult`s of `minillm.grading.grade_lessons(...)` — each part's
  own exercise tests (a part's row counts the tasks of its exercise's lesson);
* `checks`: the end-to-end checks, name → `(passed, note)`, e.g.
  `{"greedy tokens = transformers": (True, "4 of 4 prompts")}`; `add_check` adds one
  later and redraws, so the board on screen fills in as the lesson runs them.

The board lists every part (its exercise, whose code runs, its tests passed / total);
the **part** dropdown opens one part: where it runs in the engine, why it is or is not
yours, and each of its tests with the first line of what failed. `.result` holds what is
on screen (`parts`, `tests`, `checks`, `selected`, `num_yours`).
"""

from __future__ import annotations

import html

from minillm.widgets.base import CourseWidget

WHOSE_COLOUR = {"yours": "#1a7f37", "answer key": "#9a6700", "not used": "#6e7781"}
PASS, FAIL = "#1a7f37", "#cf222e"


def tests_by_part(statuses, task_results) -> dict[str, list]:
    """Part key → the TaskResults of its exercise's lesson (possibly [])."""
    by_lesson: dict[str, list] = {}
    for result in task_results or []:
        by_lesson.setdefault(result.lesson, []).append(result)
    return {s.part.key: by_lesson.get(s.exercise_number, []) for s in statuses}


def _badge(text: str, colour: str) -> str:
    return f"<b style='color:{colour}'>{html.escape(text)}</b>"


def board_html(statuses, tests: dict[str, list], checks: dict[str, tuple]) -> str:
    """The whole board: one row per part, then the end-to-end checks."""
    rows = []
    for s in statuses:
        results = tests[s.part.key]
        passed = sum(r.passed for r in results)
        score = (_badge(f"{passed}/{len(results)}", PASS if passed == len(results) else FAIL)
                 if results else "—")
        rows.append(f"<tr><td>{html.escape(s.part.title)}</td><td>{s.part.exercise[:4]}</td>"
                    f"<td>{_badge(s.whose, WHOSE_COLOUR[s.whose])}</td>"
                    f"<td style='text-align:center'>{score}</td></tr>")
    check_rows = "".join(
        f"<tr><td colspan=2>{html.escape(name)}</td><td>"
        f"{_badge('PASS' if ok else 'FAIL', PASS if ok else FAIL)}</td>"
        f"<td>{html.escape(note)}</td></tr>" for name, (ok, note) in checks.items())
    mine, used = sum(s.yours for s in statuses), sum(s.used for s in statuses)
    return ("<table style='font-size:13px'><tr><th>part</th><th>exercise</th><th>whose</th>"
            "<th>its tests</th></tr>" + "".join(rows)
            + (f"<tr><th colspan=4 style='text-align:left;padding-top:8px'>end to end</th></tr>"
               + check_rows if checks else "")
            + f"</table><p><b>{mine} of the {used}</b> parts this engine uses are yours</p>")


def part_html(status, results: list) -> str:
    """One part in detail: its role, whose code runs and why, each of its tests."""
    lines = "".join(
        f"<li>{_badge('PASS' if r.passed else 'FAIL', PASS if r.passed else FAIL)} "
        f"{html.escape(r.task)}" + (f" — <code>{html.escape(r.message[:120])}</code>"
                                    if r.message else "") + "</li>" for r in results)
    return (f"<h4 style='margin:4px 0'>{html.escape(status.part.title)} "
            f"({status.part.exercise})</h4>"
            f"<p>runs: {html.escape(status.part.role)}<br>"
            f"whose: {_badge(status.whose, WHOSE_COLOUR[status.whose])} — "
            f"{html.escape(status.reason)}</p>"
            + (f"<ul style='margin:0'>{lines}</ul>" if results else
               "<p>(its lesson's tests were not run here)</p>"))


class Scoreboard(CourseWidget):
    def __init__(self, statuses, task_results=None, checks: dict | None = None):
        import ipywidgets as W

        super().__init__()
        if not statuses:
            raise ValueError("statuses is empty: pass learner_parts(...)")
        self.statuses = list(statuses)
        self.tests = tests_by_part(self.statuses, task_results)
        self.checks = dict(checks or {})
        self.part = W.Dropdown(options=[(s.part.title, s.part.key) for s in self.statuses],
                               description="part")
        self.board = W.HTML()
        self.details = W.HTML()
        self.part.observe(self.on_change, names="value")
        self.widget = W.HBox([self.board, W.VBox([self.part, self.details],
                                                 layout=W.Layout(width="48%"))])
        self.update()

    def add_check(self, name: str, passed: bool, note: str = "") -> dict:
        """Record (or replace) one end-to-end check and redraw the board."""
        self.checks[name] = (bool(passed), note)
        return self.update()

    def update(self) -> dict:
        chosen = next(s for s in self.statuses if s.part.key == self.part.value)
        self.board.value = board_html(self.statuses, self.tests, self.checks)
        self.details.value = part_html(chosen, self.tests[chosen.part.key])
        self.result = {
            "parts": {s.part.key: s.whose for s in self.statuses},
            "tests": {key: (sum(r.passed for r in rs), len(rs)) for key, rs in self.tests.items()},
            "checks": {name: ok for name, (ok, _) in self.checks.items()},
            "selected": chosen.part.key,
            "num_yours": sum(s.yours for s in self.statuses),
        }
        return self.result
