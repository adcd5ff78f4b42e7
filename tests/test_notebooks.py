"""Every lesson runs top to bottom in a fresh kernel, and is stored without outputs.

A lesson that shows a widget is also run by tests/test_browser.py, with Run All in
JupyterLab, which fails on the same things (a cell that raises, a cell that did not run)
and then operates the widgets. When that browser test is part of this session and can
run, the headless run here is skipped rather than running the lesson twice; with the
browser tests deselected (`-m notebooks`) or impossible here, it runs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


def run_lesson(path: Path) -> tuple[list[dict], str]:
    """Execute a lesson in a fresh kernel (its environment: this process's): its errors,
    and everything its cells printed."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    client = NotebookClient(nb, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(LESSONS)}})
    start = time.perf_counter()
    client.execute()
    print(f"{path.name}: {time.perf_counter() - start:.0f} s")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    return [o for o in outputs if o.get("output_type") == "error"], printed


def run_by_the_browser_test(request, path: Path) -> bool:
    """Whether tests/test_browser.py runs this lesson top to bottom in this session."""
    wanted = f"test_lesson_widgets_work_in_a_real_browser[{path.stem}]"
    if not any(item.path.name == "test_browser.py" and item.name == wanted
               for item in request.session.items):
        return False
    from browser_support import browser_tests_run_here
    return browser_tests_run_here()


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_lesson_runs_top_to_bottom(path, request):
    if run_by_the_browser_test(request, path):
        pytest.skip("run top to bottom by tests/test_browser.py in this session (Run All in JupyterLab)")
    errors, _ = run_lesson(path)
    assert not errors


@pytest.mark.notebooks
def test_a_lesson_runs_on_the_readable_engine(monkeypatch):
    """With `MINILLM_EXECUTOR=eager` no plugin loads: the lesson's engines are the
    readable model as minillm/model/llama.py writes it (lesson 00 prints which ran)."""
    monkeypatch.setenv("MINILLM_EXECUTOR", "eager")
    errors, printed = run_lesson(LESSONS / "00_setup_model_tokens.ipynb")
    assert not errors
    assert "executor 'eager'" in printed and "executor 'cpu'" not in printed


@pytest.mark.unit
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_lesson_is_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"strip outputs of cells {dirty} (e.g. jupyter nbconvert --clear-output)"
