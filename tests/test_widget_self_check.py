"""The self-check widget: reveal, grade, per-topic scores; and the course's question bank."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from minillm.widgets.markdown import markdown_to_html
from minillm.widgets.self_check import SelfCheck, topic_scores

pytestmark = pytest.mark.unit

BANK = [
    {"id": "a1", "topic": "batching", "question": "Why does batching help decode?",
     "answer": "The weights are read **once** per step for the whole batch."},
    {"id": "a2", "topic": "batching", "question": "Where does it stop helping?",
     "answer": "- the KV memory wall\n- the compute wall"},
    {"id": "b1", "topic": "paging", "question": "What is a block table?",
     "answer": "Logical block → physical block, per sequence: `block_table[p // block_size]`."},
]


def test_reveal_then_grade_updates_the_topic_score():
    check = SelfCheck(BANK)
    assert check.result["question_id"] == "a1" and not check.result["revealed"]
    assert check.answer_view.value == "", "the answer is hidden until revealed"
    assert check.got_it.disabled and not check.reveal.disabled
    before = check.result["scores"]["batching"]
    assert before["graded"] == 0 and before["score"] is None

    check.reveal.click()
    assert check.result["revealed"] and "<b>once</b>" in check.answer_view.value
    assert not check.got_it.disabled and check.reveal.disabled

    check.partly.click()
    after = check.result["scores"]["batching"]
    assert after["graded"] == 1 and after["points"] == 0.5 and after["score"] == 0.5
    assert check.result["scores"]["paging"]["graded"] == 0
    assert check.result["question_id"] == "a2", "grading moves to the next question"
    assert not check.result["revealed"] and check.answer_view.value == ""
    assert "50%" in check.score_view.value

    check.reveal.click()
    check.got_it.click()
    assert check.result["scores"]["batching"]["score"] == pytest.approx(0.75)
    assert "75%" in check.score_view.value


def test_grading_needs_a_revealed_answer_and_regrading_replaces():
    check = SelfCheck(BANK)
    check.got_it.click()                               # disabled in the browser; ignored here too
    assert check.result["grades"] == {} and check.result["question_id"] == "a1"
    check.reveal.click()
    check.missed.click()
    assert check.result["grades"] == {"a1": 0.0}
    check.go_to("a1")
    check.reveal.click()
    check.got_it.click()
    assert check.result["grades"] == {"a1": 1.0}, "a second grade replaces the first"
    assert check.result["scores"]["batching"]["graded"] == 1
    check.reset.click()
    assert check.result["grades"] == {} and check.result["scores"]["batching"]["score"] is None


def test_topic_filter_and_navigation():
    check = SelfCheck(BANK)
    check.topic.value = "paging"
    assert check.result["deck_size"] == 1 and check.result["question_id"] == "b1"
    check.topic.value = "batching"
    check.next.click()
    assert check.result["question_id"] == "a2" and check.result["position"] == 2
    check.next.click()
    assert check.result["question_id"] == "a1", "navigation wraps around"
    check.previous.click()
    assert check.result["question_id"] == "a2"


def test_bad_banks_are_rejected():
    with pytest.raises(ValueError, match="empty"):
        SelfCheck([])
    with pytest.raises(ValueError, match="lacks"):
        SelfCheck([{"id": "x", "topic": "t", "question": "q?"}])
    with pytest.raises(ValueError, match="duplicate"):
        SelfCheck([BANK[0], BANK[0]])
    with pytest.raises(ValueError, match="grade must be"):
        SelfCheck(BANK).grade("perfect")


def test_markdown_subset():
    out = markdown_to_html("Intro with `x < y` and *stress*.\n\n1. one\n2. two\n\n```\na <b>\n```")
    assert "<code>x &lt; y</code>" in out and "<i>stress</i>" in out
    assert "<ol><li>one</li><li>two</li></ol>" in out
    assert "<pre" in out and "a &lt;b&gt;" in out
    assert topic_scores(BANK, {"b1": 1.0})["paging"] == {"questions": 1, "graded": 1,
                                                         "points": 1.0, "score": 1.0}


def load_bank():
    path = Path(__file__).resolve().parent.parent / "lessons" / "interview_questions.py"
    spec = importlib.util.spec_from_file_location("interview_questions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_course_question_bank_loads_into_the_widget():
    bank = load_bank()
    questions = bank.load_questions()
    assert len(questions) >= 40
    assert len({q["topic"] for q in questions}) >= 8
    for q in questions:
        assert not re.search(r"\{[a-z_0-9]+(:[^}]*)?\}", q["answer"]), f"unfilled placeholder in {q['id']}"
    check = SelfCheck(questions)
    check.reveal.click()
    check.got_it.click()
    assert sum(row["graded"] for row in check.result["scores"].values()) == 1
