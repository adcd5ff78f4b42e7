"""The grader itself, and the promise every exercise makes: its tests fail on the
untouched stub and pass on the solution."""

from __future__ import annotations

import pytest

from minillm.grading import TaskResult, format_table, grade, lessons_with_exercises, exercise_test_file, write_summary

LESSONS = lessons_with_exercises()


@pytest.mark.exercises
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_task_fails_on_the_stub_and_passes_on_the_solution(lesson):
    on_stub = grade(lesson, "exercises")
    on_solution = grade(lesson, "solutions")
    assert len(on_stub) >= 2
    assert not any(r.passed for r in on_stub), format_table(on_stub)
    assert all(r.passed for r in on_solution), format_table(on_solution)
    assert [r.task for r in on_stub] == [r.task for r in on_solution]


@pytest.mark.unit
def test_unknown_lesson_is_a_clear_error():
    with pytest.raises(ValueError, match="is not one lesson with an exercise"):
        exercise_test_file("99")


@pytest.mark.unit
def test_summary_files(tmp_path):
    results = [TaskResult("02", "slot_waste", True), TaskResult("02", "padded", False, "boom")]
    write_summary(results, tmp_path / "g.csv")
    lines = (tmp_path / "g.csv").read_text().splitlines()
    assert lines[0] == "lesson,task,passed,message" and lines[2] == "02,padded,False,boom"
    write_summary(results, tmp_path / "g.json")
    assert '"task": "slot_waste"' in (tmp_path / "g.json").read_text()
    assert "1/2 tasks pass" in format_table(results)
