"""Two authoring rules of `lessons/AUTHORING.md`, kept by a test so they hold from now on.

1. **No typed measurement.** A number with a unit (ms, s, %, ×, GB, tok/s, ...) in a
   markdown cell is either printed by code, or the cell cites where it comes from (a
   paper with its authors, a link, the seed article, or the word *illustrative* /
   *hypothetical* for a made-up example). Arithmetic (a line with `=`) and code
   (`inline` or fenced) are exempt. Run times of the notebook itself are printed by its
   last cell, never typed.
2. **Code cells show one idea**: at most 15 lines; plotting and drawing helpers live in
   `lessons/figures/`.
3. **No answer before the question.** A lesson may print the answer key's source
   (`inspect.getsource`) of a function some exercise asks the learner to write only once
   that exercise's "Your turn" is behind the learner: in a later lesson, or after the
   exercise's own check cell.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
EXERCISES = LESSONS.parent / "exercises"
NOTEBOOKS = sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))
MAX_CODE_LINES = 15

NUMBER_WITH_UNIT = re.compile(
    r"(?<![\w.])\d[\d,.]*\s?(?:ms|µs|s|%|×|x|GB|GiB|MB|MiB|KiB|tok/s|tokens/s|req/s)(?![\w/])"
    r"|runs in (?:about |~)?\d+(?:[–-]\d+)? ?min")
CITATION = re.compile(r"et al\.|arXiv|\]\(https?://|illustrative|hypothetical|datasheet"
                      r"|\bseed 00\d|[Ss]ource:")


def typed_numbers(markdown: str) -> list[str]:
    """Numbers with units a markdown cell states without a source (see module docstring)."""
    if CITATION.search(markdown):
        return []
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\$[^$]*\$", "", text)                 # LaTeX
    found = []
    for line in text.split("\n"):
        if "=" not in line:
            found += NUMBER_WITH_UNIT.findall(line)
    return found


def long_code_cells(cells: list[dict]) -> list[tuple[int, int]]:
    """(cell index, lines) of every code cell longer than the limit."""
    out = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            lines = "".join(cell["source"]).rstrip("\n").split("\n")
            if len(lines) > MAX_CODE_LINES:
                out.append((i, len(lines)))
    return out


def cells_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


@pytest.mark.unit
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_typed_measurement_in_markdown(path):
    bad = {i: typed_numbers("".join(c["source"])) for i, c in enumerate(cells_of(path))
           if c["cell_type"] == "markdown"}
    bad = {i: found for i, found in bad.items() if found}
    assert not bad, (f"markdown cells state numbers no code printed and no source backs: "
                     f"{bad} — print them from a code cell, or cite the source")


@pytest.mark.unit
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_code_cells_show_one_idea(path):
    assert not long_code_cells(cells_of(path)), (
        f"code cells over {MAX_CODE_LINES} lines (cell, lines): {long_code_cells(cells_of(path))}"
        " — move drawing helpers to lessons/figures/, split the cell")


@pytest.mark.unit
def test_both_rules_catch_a_deliberately_bad_cell():
    """The checks can fail: a typed timing and a 16-line cell are flagged; a cited
    figure, an arithmetic line and inline code are not."""
    assert typed_numbers("Continuous batching made it 3.2× faster and 120 ms quicker.") == ["3.2×", "120 ms"]
    assert typed_numbers("The notebook runs in about 2 minutes.") == ["runs in about 2 min"]
    assert typed_numbers("Orca (Yu et al., OSDI 2022) reports 36.9×.") == []
    assert typed_numbers("8 slots × 700 iterations = 5,600 slot-iterations, 79.5% idle") == []
    assert typed_numbers("the flag `--max-num-seqs 256` and `1.5 s`") == []
    cell = {"cell_type": "code", "source": ["x = 1\n"] * 16}
    assert long_code_cells([cell]) == [(0, 16)]
    assert long_code_cells([{"cell_type": "code", "source": ["x = 1\n"] * 15}]) == []



# ---------------------------------------------------------------------- rule 3

def exercise_tasks() -> dict[str, str]:
    """Task name → the lesson number of the exercise that asks for it: every function or
    method of `exercises/exNN_*.py` whose body still raises `NotImplementedError`."""
    tasks = {}
    for path in sorted(EXERCISES.glob("ex[0-9][0-9]_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    isinstance(n, ast.Raise) and "NotImplementedError" in ast.unparse(n)
                    for n in ast.walk(node)):
                tasks.setdefault(node.name, path.name[2:4])
    return tasks


def printed_sources(source: str) -> list[str]:
    """The dotted names a code cell passes to `inspect.getsource` (a loop variable over a
    tuple literal counts as each of the tuple's names)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    loops = {node.target.id: [ast.unparse(e) for e in node.iter.elts]
             for node in ast.walk(tree)
             if isinstance(node, ast.For) and isinstance(node.target, ast.Name)
             and isinstance(node.iter, (ast.Tuple, ast.List))}
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("getsource") and node.args:
            arg = ast.unparse(node.args[0])
            names += loops.get(arg, [arg])
    return names


def answers_before_their_question(path: Path, tasks: dict[str, str]) -> list[str]:
    lesson = path.name[:2]
    cells = cells_of(path)
    check = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"
                  and f'check("{lesson}"' in "".join(c["source"])), len(cells))
    found = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        for name in printed_sources("".join(cell["source"])):
            asked_in = tasks.get(name.rsplit(".", 1)[-1])
            if asked_in is None:
                continue
            if lesson < asked_in or (lesson == asked_in and i < check):
                found.append(f"cell {i} prints {name}, a task of ex{asked_in}")
    return found


@pytest.mark.unit
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_answer_key_source_before_its_check(path):
    found = answers_before_their_question(path, exercise_tasks())
    assert not found, (f"{found} — print the answer key's source after the exercise's check "
                       "cell (or in a later lesson), describe it in prose before")


@pytest.mark.unit
def test_the_answer_rule_catches_a_printed_task(tmp_path):
    tasks = exercise_tasks()
    assert tasks["admit_waiting"] == "06" and tasks["priority_key"] == "09"
    assert printed_sources("for f in (A.b, c):\n    print(inspect.getsource(f))") == ["A.b", "c"]
    early = LESSONS / "03_iteration_level_scheduling.ipynb"
    cells = cells_of(early)
    cells.insert(3, {"cell_type": "code", "source": ["print(inspect.getsource(ContinuousScheduler.admit_waiting))"]})
    path = tmp_path / early.name
    path.write_text(json.dumps({"cells": cells}))
    assert answers_before_their_question(path, tasks) == [
        "cell 3 prints ContinuousScheduler.admit_waiting, a task of ex06"]
    assert answers_before_their_question(early, tasks) == []
