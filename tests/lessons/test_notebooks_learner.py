"""Every lesson in learner mode (the generated stubs): every self-check cell (tagged "selfcheck") fails with the
friendly AssertionError, and every other cell still runs (tests/lessons/test_notebooks.py runs them with the
solutions). A file of its own, so that `make test`'s parallel run gives it a worker of its own."""

import pytest

from tests.lessons.test_notebooks import NOTEBOOKS, _execute, _selfcheck_cells


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_in_learner_mode_fails_only_at_its_selfchecks(path, monkeypatch):
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
