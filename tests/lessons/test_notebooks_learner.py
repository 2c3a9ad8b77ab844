"""Every lesson in learner mode (the generated stubs): every self-check cell (tagged "selfcheck") fails with the
friendly AssertionError, and every other cell still runs (tests/lessons/test_notebooks.py runs them with the
solutions). A file of its own, so that `make test`'s parallel run gives it a worker of its own."""

import json
import re

import pytest

from helpers import env, loader
from tests.lessons.test_notebooks import NOTEBOOKS, _execute, _selfcheck_cells


def learner_mode_can_differ(path) -> bool:
    """Whether the stubs can change anything the lesson runs: it has a self-check, or builds an op with an
    exercise in its sources, or reaches the ops or exercises through helpers.ops/helpers.exercises (which
    build what they need). A lesson with none of these (00: the hello op) runs the same code either way."""
    nb = json.loads(path.read_text())
    if _selfcheck_cells(nb):
        return True
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    if re.search(r"helpers\.(ops|exercises)|from helpers import [^\n]*\b(ops|exercises)\b|COURSE_SOLUTIONS", code):
        return True
    includes = loader._include_dirs([])
    for op in set(re.findall(r'loader\.load\(\s*"(\w+)"', code)):
        files = {f for s in loader.sources_for(op) for f in (s.resolve(), *loader._local_deps(s.resolve(), includes))}
        if any(f.is_relative_to(env.KERNELS / "exercises") or ".exercises." in f.name for f in files):
            return True
    return "loader.load(" in code and not re.findall(r'loader\.load\(\s*"(\w+)"', code)


def test_only_lessons_without_exercises_skip_the_learner_run():
    skipped = [p.stem for p in NOTEBOOKS if not learner_mode_can_differ(p)]
    assert skipped == ["00_setup"], f"lessons whose learner run would be skipped: {skipped}; is that right?"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_in_learner_mode_fails_only_at_its_selfchecks(path, monkeypatch):
    if not learner_mode_can_differ(path):
        pytest.skip("no self-check, no exercise in what it builds: the solutions run (test_notebooks.py) is this run")
    nb = _execute(path, monkeypatch, solutions=False)
    checks = set(_selfcheck_cells(nb))
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        head = "".join(cell.source).splitlines()[:1]
        if i in checks:
            assert errors, f"{path.name} cell {i} {head}: the self-check passed on the stub"
            assert errors[0]["ename"] == "AssertionError" and "not yet" in errors[0]["evalue"], (
                f"{path.name} cell {i} {head}: the stub should fail with the friendly AssertionError, got "
                f"{errors[0]['ename']}: {errors[0]['evalue'][:300]}"
            )
        else:
            assert not errors, (
                f"{path.name} cell {i} {head} failed in learner mode: {errors[0]['ename']}: {errors[0]['evalue'][:300]}"
            )
