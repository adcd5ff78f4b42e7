"""The bilingual glossary covers every Chinese term the lessons introduce."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))
PAREN = re.compile(r"[(（]([^()（）]*)[)）]")               # "english (中文)", ASCII or full-width
# a run of Chinese, possibly with Latin words inside ("首 token 延迟"), starting and ending in Chinese
CHINESE_TERM = re.compile(r"[\u3400-\u9fff](?:[\u3400-\u9fff A-Za-z0-9·\-]*[\u3400-\u9fff])?")


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def glossary_rows() -> list[list[str]]:
    """Table rows of lessons/glossary.md: [english, chinese, definition, lesson]."""
    rows = []
    for line in (LESSONS / "glossary.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "English":
            continue
        rows.append(cells)
    return rows


def chinese_terms_in(notebook: Path) -> set[str]:
    """Chinese terms in parentheses in the notebook's markdown cells."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    terms = set()
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        for group in PAREN.findall(source):
            terms.update(CHINESE_TERM.findall(group))
    return terms


def test_glossary_has_enough_well_formed_entries():
    rows = glossary_rows()
    assert len(rows) >= 40
    for row in rows:
        assert len(row) == 4, f"malformed row: {row}"
        english, chinese, definition, lesson = row
        assert english and definition, row
        assert CHINESE_TERM.search(chinese), f"{english!r} has no Chinese name"
        assert re.fullmatch(r"\d\d", lesson), f"{english!r}: lesson must be two digits, got {lesson!r}"
    english = [r[0].lower() for r in rows]
    assert len(english) == len(set(english)), "duplicate English entries"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_chinese_term_of_a_lesson_is_in_the_glossary(notebook):
    chinese_column = " ".join(squash(row[1]) for row in glossary_rows())
    missing = sorted(t for t in chinese_terms_in(notebook) if squash(t) not in chinese_column)
    assert not missing, f"{notebook.name}: add these terms to lessons/glossary.md: {missing}"


def test_the_extractor_finds_terms():
    """Guard against a regex that silently finds nothing."""
    found = set().union(*(chinese_terms_in(nb) for nb in NOTEBOOKS)) if NOTEBOOKS else set()
    assert {"连续批处理", "队首阻塞"} <= found or not NOTEBOOKS
