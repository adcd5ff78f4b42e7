"""Exercise tests: each test is one graded task.

A test file sets `EXERCISE = "exNN_topic"` and uses the `ex` fixture, which imports
`exercises.exNN_topic` or `solutions.exNN_topic` (see minillm.grading).
"""

from __future__ import annotations

import pytest

from minillm.grading import load_exercise


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/exercises/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.exercises)


@pytest.fixture
def ex(request):
    return load_exercise(request.module.EXERCISE)
