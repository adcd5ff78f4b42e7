"""The grader itself, and the promise every exercise makes: its tests fail on the
untouched stub and pass on the solution."""

from __future__ import annotations

import pytest

from minillm.grading import (TaskResult, exercise_test_file, format_table, grade, grade_lessons,
                             lessons_with_exercises, write_summary)

CAPSTONE = "13"        # its engine tasks pass on the stubs too: graded on its own below
LESSONS = [lesson for lesson in lessons_with_exercises() if lesson != CAPSTONE]


@pytest.fixture(scope="module")
def graded_stubs() -> list[TaskResult]:
    """Every lesson graded on the untouched stubs, through the grader: one pytest process."""
    return grade_lessons(LESSONS, "exercises")


@pytest.mark.exercises
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_task_fails_on_the_stub_and_passes_on_the_solution(lesson, graded_stubs):
    """The stub half through the grader; the solution half is the suite's own run of the
    very same tests (tests/exercises/, graded against solutions/ — tests/conftest.py), so
    each task is collected and must pass there. Here: every test of the file is a task."""
    on_stub = [r for r in graded_stubs if r.lesson == lesson]
    assert len(on_stub) >= 2
    assert not any(r.passed for r in on_stub), format_table(on_stub)
    tests = exercise_test_file(lesson).read_text()
    for result in on_stub:
        assert f"def test_{result.task.split('[')[0]}(" in tests, result.task


@pytest.mark.exercises
def test_one_lesson_is_graded_alone_as_the_check_cell_does():
    results = grade("01", "solutions")
    assert {r.lesson for r in results} == {"01"} and len(results) >= 2
    assert all(r.passed for r in results), format_table(results)


@pytest.mark.exercises
def test_capstone_row_says_which_parts_are_yours():
    """On the stubs no part is the learner's; the note names them. (The capstone's engine
    tasks run on solutions/ in the suite itself: tests/exercises/test_ex13_capstone.py.)"""
    assert CAPSTONE in lessons_with_exercises()
    results = grade(CAPSTONE, "exercises", tasks="your_parts")
    assert [(r.lesson, r.task, r.passed) for r in results] == [
        (CAPSTONE, "your_parts_run_in_the_engine", False)], format_table(results)
    assert "yours 0/9: none | not yet: scheduler, block allocator" in results[0].message, \
        results[0].message


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
