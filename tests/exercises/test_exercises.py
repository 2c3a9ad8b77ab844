"""Every exercise, in all directions: the learner's stub is what the solution generates; the self-check
passes with the solution, and fails with an AssertionError (not a crash) on the stub and on every committed
wrong answer (helpers/exercises/<name>.py WRONG), on each device present: the CPU parts in CI, the CUDA
parts on a GPU machine."""

import json
import re

import pytest
import torch

from helpers import env, exercises

NAMES = exercises.names()
WRONGS = [(name, w) for name in NAMES for w in getattr(exercises.module(name), "WRONG", [])]


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
def test_every_exercise_names_its_op_and_has_three_wrong_answers_per_part(name):
    mod = exercises.module(name)
    assert hasattr(mod, "OP") and callable(mod.check)
    wrong = getattr(mod, "WRONG", [])
    parts = {w.part for w in wrong}
    assert parts <= {"cpu", "cuda"}
    assert len(wrong) >= 3, f"{name}: commit at least three wrong answers learners really make"


@pytest.mark.parametrize("name,wrong", WRONGS, ids=[f"{n}-{w.part}-{w.why[:40]}" for n, w in WRONGS])
def test_wrong_answer_still_applies_to_the_solution(name, wrong):
    text = exercises.apply_wrong(name, wrong)
    assert text != exercises.solution_file(name, wrong).read_text()


def _solutions_notebook_checking(name: str, session) -> str | None:
    """The lesson whose solutions run (tests/lessons/test_notebooks.py), collected in this session, calls
    NAME.check() as it is: on this machine's device, with the solutions, which is this test's case."""
    call = re.compile(rf"^{name}\.check\(\)", re.M)  # a statement of its own, not a mention
    for item in session.items:
        if item.nodeid.startswith("tests/lessons/test_notebooks.py::test_notebook_runs_top_to_bottom"):
            stem = item.nodeid.rsplit("[", 1)[-1].rstrip("]")
            cells = json.loads((env.REPO_ROOT / "notebooks" / f"{stem}.ipynb").read_text())["cells"]
            if any(call.search("".join(c["source"])) for c in cells if c["cell_type"] == "code"):
                return stem
    return None


@pytest.mark.parametrize("name", NAMES)
def test_solution_passes_selfcheck(name, device, monkeypatch, request):
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    lesson = _solutions_notebook_checking(name, request.session) if not env.cuda_mode() else None
    if lesson:  # CPU mode: the lesson makes the same call (on a GPU it checks the GPU, and this test the CPU)
        pytest.skip(f"{lesson}'s run with the solutions in this session calls {name}.check() on the CPU")
    assert exercises.module(name).check(device=device) > 0


@pytest.mark.parametrize("name", NAMES)
def test_stub_fails_selfcheck_with_assertion(name, device, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", "0")
    with pytest.raises(AssertionError, match="not yet"):
        exercises.module(name).check(device=device)


@pytest.mark.parametrize("name,wrong", WRONGS, ids=[f"{n}-{w.part}-{w.why[:40]}" for n, w in WRONGS])
def test_wrong_answer_fails_selfcheck(name, wrong, device):
    if device.type != wrong.part:
        pytest.skip(f"breaks the {wrong.part} part; this run checks {device.type}")
    if wrong.min_free_gib and torch.cuda.mem_get_info()[0] < wrong.min_free_gib * 2**30:
        pytest.skip(f"the self-check catches this with {wrong.min_free_gib:.0f} GiB of free GPU memory")
    if wrong.min_free_gib:  # an index that wraps past 2^31 can fault: a sticky error ends CUDA in its process
        _in_a_child_fails_selfcheck(name, wrong)
        return
    ext = exercises.build_wrong(name, wrong)
    with pytest.raises(AssertionError, match=re.escape("not yet")):
        exercises.module(name).check(device=device, ext=ext)


def _in_a_child_fails_selfcheck(name, wrong):
    """The wrong answer's self-check on the GPU in a process of its own, so that an illegal address it causes
    cannot fail the tests after it in this one."""
    import subprocess
    import sys

    i = exercises.module(name).WRONG.index(wrong)
    code = (
        "from helpers import env, exercises\n"
        "env.bootstrap(quiet=True)\n"
        f"m = exercises.module({name!r}); w = m.WRONG[{i}]\n"
        "try:\n"
        f"    m.check(device='cuda', ext=exercises.build_wrong({name!r}, w))\n"
        "except AssertionError as e:\n"
        "    print('REJECTED' if 'not yet' in str(e) else 'OTHER ASSERTION', str(e).splitlines()[0])\n"
        "else:\n"
        "    print('PASSED')\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=env.REPO_ROOT, env=env.child_environ(), capture_output=True, text=True
    )
    assert "REJECTED" in r.stdout, (
        f"{name}: {wrong.why}: the self-check did not reject it:\n{r.stdout}{r.stderr[-3000:]}"
    )
