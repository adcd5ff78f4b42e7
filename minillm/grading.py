"""Autograding for the exercises: one table per lesson, one summary per class.

Every lesson with an exercise has a stub module `exercises/exNN_<topic>.py` (you edit
it) and a graded answer `solutions/exNN_<topic>.py`. The tests in
`tests/exercises/test_exNN_<topic>.py` import whichever one is being graded, so the
very same tests grade a learner's work and prove the solutions right. Each test is
one **task**.

    python -m minillm.grading 02                 # grade lesson 02's exercise, print a table
    python -m minillm.grading --all --out grades.csv   # every lesson → CSV (or .json)
    python -m minillm.grading 02 --target solutions    # check the answer key instead

Lesson 13 is the capstone row: your parts assembled into one engine
(`LLM(components="exercises")`). Its tasks say which parts of the engine are yours, and
whether that engine gives transformers' tokens and serves a stream to the openai client.

In a notebook, the "Your turn" check cell calls `check("02")`.

Tests run in a fresh Python process (pytest; one for all lessons with `--all`), so an
edited exercise is always re-imported, and a runaway loop in a learner's code fails its
task after `TASK_TIMEOUT` seconds instead of hanging the notebook.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
EXERCISE_TESTS = REPO_ROOT / "tests" / "exercises"
TARGETS = ("exercises", "solutions")
TARGET_ENV = "MINILLM_EXERCISES_FROM"


@dataclass
class TaskResult:
    lesson: str
    task: str
    passed: bool
    message: str = ""


def exercise_target() -> str:
    """Which package the exercise tests import: 'exercises' (default) or 'solutions'."""
    target = os.environ.get(TARGET_ENV, "exercises")
    if target not in TARGETS:
        raise ValueError(f"{TARGET_ENV} must be one of {TARGETS}, got {target!r}")
    return target


def load_exercise(module_name: str):
    """Import `exercises.<module_name>` or `solutions.<module_name>` (see exercise_target)."""
    import importlib
    return importlib.import_module(f"{exercise_target()}.{module_name}")


def exercise_test_file(lesson: str) -> Path:
    """tests/exercises/test_exNN_*.py for exactly one lesson: 'NN', 'N', 'exNN' or 'NN_topic'.

    Anything else ('1x', '123', '02abc', '') is refused rather than guessed at."""
    files = {p.name[len("test_"):-len(".py")]: p for p in EXERCISE_TESTS.glob("test_ex*_*.py")}
    wanted = str(lesson).strip().removeprefix("ex")
    for name, path in files.items():          # name: 'ex02_static_batching'
        number, topic = name[2:4], name[5:]
        if wanted in (number, number.lstrip("0"), f"{number}_{topic}"):
            return path
    known = ", ".join(lessons_with_exercises()) or "none yet"
    raise ValueError(f"lesson {lesson!r} is not one lesson with an exercise; give its number "
                     f"(e.g. 02) — lessons with exercises: {known}")


def lessons_with_exercises() -> list[str]:
    return sorted(p.name[len("test_ex"):len("test_ex") + 2] for p in EXERCISE_TESTS.glob("test_ex*_*.py"))


TASK_TIMEOUT = 120     # seconds one task may run: a runaway loop fails its task only


def grade(lesson: str, target: str = "exercises", timeout: float = 600,
          tasks: str | None = None) -> list[TaskResult]:
    """Run one lesson's exercise tests against `target`; one TaskResult per test."""
    return grade_lessons([lesson], target, timeout, tasks)


def grade_lessons(lessons: list[str], target: str = "exercises",
                  timeout: float = 1800, tasks: str | None = None) -> list[TaskResult]:
    """Run several lessons' exercise tests against `target` in one pytest process (it
    imports torch and minillm once, not once per lesson); one TaskResult per test, in
    lesson order. Each task may run `TASK_TIMEOUT` seconds, the whole run `timeout`.
    `tasks`: only the tasks whose names match this pytest `-k` expression."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    files = {_lesson_number(path): path for path in map(exercise_test_file, lessons)}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        env = {**os.environ, TARGET_ENV: target, "HF_HUB_OFFLINE": "1"}
        cmd = [sys.executable, "-m", "pytest", *map(str, files.values()), "-q",
               "-p", "no:cacheprovider", f"--timeout={TASK_TIMEOUT}",
               f"--junitxml={report}", "-o", "junit_family=xunit1",
               *(["-k", tasks] if tasks else [])]
        try:
            subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout)
        except subprocess.TimeoutExpired:
            return [TaskResult(n, "(all)", False, f"timed out after {timeout:.0f} s") for n in files]
        if not report.exists():
            return [TaskResult(n, "(all)", False, "the tests could not be collected") for n in files]
        found = _parse_junit(report)
    return [result for number in files
            for result in found.get(number)
            or [TaskResult(number, "(all)", False, "no tests ran: check the exercise imports")]]


def _lesson_number(test_file: Path) -> str:
    """'02' for tests/exercises/test_ex02_static_batching.py."""
    return test_file.name[len("test_ex"):len("test_ex") + 2]


def _parse_junit(report: Path) -> dict[str, list[TaskResult]]:
    """The junit report's test cases as TaskResults, by lesson number."""
    results: dict[str, list[TaskResult]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]      # test_ex02_static_batching
        lesson = module[len("test_ex"):len("test_ex") + 2]
        task = case.get("name", "?").removeprefix("test_")
        problem = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if problem is None:
            result = TaskResult(lesson, task, True)
        else:
            message = (problem.get("message") or problem.tag).strip().splitlines()
            result = TaskResult(lesson, task, False, message[0][:240] if message else "")
        results.setdefault(lesson, []).append(result)
    return results


def format_table(results: list[TaskResult]) -> str:
    width = max(len(r.task) for r in results)
    lines = [f"{'task'.ljust(width)}  result  note", f"{'-' * width}  ------  ----"]
    for r in results:
        lines.append(f"{r.task.ljust(width)}  {'PASS' if r.passed else 'FAIL':6}  {r.message}")
    passed = sum(r.passed for r in results)
    lines.append(f"{passed}/{len(results)} tasks pass")
    return "\n".join(lines)


def check(lesson: str, target: str | None = None, tasks: str | None = None) -> None:
    """Notebook check cell: grade and show the per-task table (returns nothing, so
    Jupyter shows only the table; use `grade()` for the results as data)."""
    results = grade(lesson, target or exercise_target(), tasks=tasks)
    try:
        from IPython.display import HTML, display
        rows = "".join(
            f"<tr><td>{r.task}</td><td style='color:{'#1a7f37' if r.passed else '#cf222e'}'>"
            f"<b>{'PASS' if r.passed else 'FAIL'}</b></td><td><code>{_html(r.message)}</code></td></tr>"
            for r in results)
        passed = sum(r.passed for r in results)
        display(HTML(f"<table><tr><th>task</th><th>result</th><th>note</th></tr>{rows}</table>"
                     f"<p><b>{passed}/{len(results)}</b> tasks pass</p>"))
    except ImportError:
        print(format_table(results))


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_summary(results: list[TaskResult], path: str | Path) -> None:
    """CSV or JSON (by extension) with one row per (lesson, task)."""
    path = Path(path)
    rows = [asdict(r) for r in results]
    if path.suffix == ".json":
        path.write_text(json.dumps(rows, indent=2))
        return
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["lesson", "task", "passed", "message"])
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minillm.grading", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lesson", nargs="?", help="lesson number, e.g. 02")
    parser.add_argument("--all", action="store_true", help="grade every lesson")
    parser.add_argument("--target", choices=TARGETS, default="exercises")
    parser.add_argument("--out", help="summary file (.csv or .json), with --all")
    args = parser.parse_args(argv)
    if not args.all and not args.lesson:
        parser.error("give a lesson number, or --all")
    if args.all and args.lesson:
        parser.error(f"give a lesson number ({args.lesson}) or --all, not both")
    if args.out:                                   # checked before minutes of grading
        out = Path(args.out)
        if out.suffix not in (".csv", ".json"):
            parser.error(f"--out {args.out!r} must end in .csv or .json")
        if not out.parent.resolve().is_dir():
            parser.error(f"--out {args.out!r}: the folder {str(out.parent)!r} does not exist")
    lessons = lessons_with_exercises() if args.all else [args.lesson]
    try:
        everything = grade_lessons(lessons, args.target)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for lesson in dict.fromkeys(r.lesson for r in everything):
        results = [r for r in everything if r.lesson == lesson]
        print(f"\nlesson {lesson} ({args.target})\n{format_table(results)}")
    if args.out:
        write_summary(everything, args.out)
        print(f"\nsummary written to {args.out}")
    return 0 if all(r.passed for r in everything) else 1


if __name__ == "__main__":
    sys.exit(main())
