"""Every lesson runs top to bottom in a fresh kernel, and is stored without outputs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_lesson_runs_top_to_bottom(path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    client = NotebookClient(nb, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(LESSONS)}})
    start = time.perf_counter()
    client.execute()
    print(f"{path.name}: {time.perf_counter() - start:.0f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


@pytest.mark.unit
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_lesson_is_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"strip outputs of cells {dirty} (e.g. jupyter nbconvert --clear-output)"
