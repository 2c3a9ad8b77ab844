"""Every exercise: the learner's stub is what the solution generates, the self-check passes with the
solution and fails with an AssertionError (not a crash) on the stub, on every device present."""

import importlib

import pytest

from helpers import exercises

NAMES = exercises.names()


def test_there_are_exercises():
    assert NAMES, "kernels/solutions/ is empty"


def test_stubs_are_generated_from_solutions():
    assert exercises.out_of_sync() == [], "run `python -m helpers.exercises` to regenerate kernels/exercises/"


def test_make_stub_removes_the_answer_and_keeps_the_rest():
    text = "int f() {\n  // BEGIN SOLUTION\n  return 42;\n  // END SOLUTION\n}\n"
    assert exercises.make_stub(text) == "int f() {\n  // TODO(exercise): your code here (the solution is 1 lines).\n}\n"
    with pytest.raises(ValueError):
        exercises.make_stub("no markers")


@pytest.mark.parametrize("name", NAMES)
def test_solution_passes_selfcheck(name, device, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    assert importlib.import_module(f"helpers.exercises.{name}").check(device=device) > 0


@pytest.mark.parametrize("name", NAMES)
def test_stub_fails_selfcheck_with_assertion(name, device, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", "0")
    with pytest.raises(AssertionError, match="not yet"):
        importlib.import_module(f"helpers.exercises.{name}").check(device=device)
