"""Lesson 09's practice set, graded: for each op (helpers/practice/<op>.py), the solution passes every check this
machine can run, the learner's generated folder builds and is rejected (not crashed on), each corpus entry is
rejected by the check it is meant for, and the folder's own tests pass on the solution."""

import subprocess
import sys

import pytest

from helpers import env, grade, practice
from helpers.grade_corpus import materialize

CUDA = env.cuda_mode()
SPECS = {name: grade.spec(name) for name in practice.NAMES}
ENTRIES = [(name, e) for name, spec in SPECS.items() for e in spec.CORPUS]


@pytest.mark.parametrize("name", practice.NAMES)
def test_the_spec_says_what_the_lesson_needs(name):
    spec = SPECS[name]
    assert spec.NAME == name
    assert spec.CHECKS[:2] == ["build", "registered"] and spec.CHECKS[-1] == "integrity", spec.CHECKS
    for check in spec.CHECKS:
        assert check in grade.GENERIC or callable(getattr(spec, f"check_{check}", None)), f"{name}: no check_{check}"
    assert all(k.startswith("course::") and v.startswith(k + "(") for k, v in spec.SCHEMAS.items())
    assert len(spec.CORPUS) >= 5 and sum(e.part == "cpu" for e in spec.CORPUS) >= 4, "five wrong answers, four on CPU"
    assert all(e.rejects in spec.CHECKS for e in spec.CORPUS)
    assert len({e.name for e in spec.CORPUS}) == len(spec.CORPUS)
    assert spec.TASK.strip() and spec.LINES > 0


@pytest.mark.parametrize("name", practice.NAMES)
def test_the_solution_passes_every_check(name):
    report = grade.op(name, solution=True, quiet=True)
    assert report.passed, report.card()
    ran = {r.check for r in report.results if r.status == grade.PASS}
    assert {"build", "registered", "forward", "backward", "errors", "opcheck", "compile", "integrity"} <= ran
    if CUDA:
        assert {"stream", "speed"} <= ran, report.card()


@pytest.mark.parametrize("name", practice.NAMES)
def test_the_learners_folder_builds_and_is_not_yet_done(name):
    todo = practice.files(name, practice.folder(name, solution=False))
    assert sum(f.todos for f in todo) >= 3, "the learner's folder leaves the kernels, the loops and the autograd"
    assert not any(f.todos for f in practice.files(name, practice.folder(name, solution=True)))
    report = grade.op(name, solution=False, quiet=True, checks=["forward", "backward"])
    assert report.status("build") == grade.PASS, report.card()
    assert report.failed, report.card()
    assert not any("crashed" in r.detail or "ended before" in r.detail for r in report.failed), report.card()


@pytest.mark.parametrize("name,entry", ENTRIES, ids=[f"{n}:{e.name}" for n, e in ENTRIES])
def test_a_corpus_entry_is_rejected_by_its_check(name, entry, tmp_path):
    if entry.part == "cuda" and not CUDA:
        pytest.skip("a GPU part: only a GPU shows it")
    report = grade.op(name, folder=materialize(entry, tmp_path, name), checks=[entry.rejects], quiet=True)
    assert report.status(entry.rejects) == grade.FAIL, f"{entry.name} ({entry.why}) was not rejected:\n{report.card()}"


@pytest.mark.parametrize("name", practice.NAMES)
def test_the_folders_own_tests_pass_on_the_solution(name):
    test = practice.folder(name, solution=True) / f"test_{name}.py"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(test)]
    r = subprocess.run(cmd, cwd=env.REPO_ROOT, env=env.child_environ(), capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
