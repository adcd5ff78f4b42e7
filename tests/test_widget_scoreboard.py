"""The capstone's scoreboard: whose part runs, each part's tests, the end-to-end checks."""

from __future__ import annotations

import pytest

from minillm.engine.components import learner_parts
from minillm.grading import TaskResult
from minillm.widgets.scoreboard import Scoreboard

pytestmark = pytest.mark.unit

RESULTS = [TaskResult("05", "allocate_and_free", True), TaskResult("05", "double_free", False,
                                                                  "AssertionError: no raise"),
           TaskResult("06", "decodes_first", True), TaskResult("04", "flat_batch", True)]


def test_board_counts_each_parts_tests_and_opens_a_part():
    statuses = learner_parts("solutions")
    board = Scoreboard(statuses, RESULTS, {"greedy tokens = transformers": (True, "4 of 4")})
    result = board.result
    assert result["num_yours"] == sum(s.yours for s in statuses) >= 8
    assert result["tests"]["allocator"] == result["tests"]["block_table"] == (1, 2)
    assert result["tests"]["scheduler"] == (1, 1) and result["tests"]["policy"] == (0, 0)
    assert result["checks"] == {"greedy tokens = transformers": True}
    assert "1/2" in board.board.value and "end to end" in board.board.value
    before = board.details.value
    board.part.value = "allocator"
    assert board.result["selected"] == "allocator" and board.details.value != before
    assert "double_free" in board.details.value and "no raise" in board.details.value
    board.add_check("served stream = generate", False, "text differs")
    assert board.result["checks"]["served stream = generate"] is False
    assert "text differs" in board.board.value


def test_the_stubs_board_says_nothing_is_yours_and_why():
    board = Scoreboard(learner_parts("exercises"))
    assert board.result["num_yours"] == 0 and "<b>0 of the 9</b>" in board.board.value
    assert set(board.result["parts"].values()) <= {"answer key", "not used"}
    board.part.value = "flat_batch"
    assert "NotImplementedError" in board.details.value
    assert "were not run here" in board.details.value


def test_an_empty_board_is_refused():
    with pytest.raises(ValueError, match="learner_parts"):
        Scoreboard([])
