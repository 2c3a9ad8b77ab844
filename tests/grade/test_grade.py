"""helpers.grade and lesson 08's capstone: the solution passes every check this machine can run; each entry of the
corpus (helpers/grade_corpus.py) is rejected by the check it is meant for; a crash ends a child process, not the
grading; the learner's empty folder gets a clear first step; the progress table of the whole course."""

import pytest

from helpers import capstone, env, grade
from helpers.grade_corpus import CORPUS, materialize

CUDA = env.cuda_mode()


def test_the_solution_passes_every_check():
    report = grade.op(solution=True, quiet=True)
    assert report.passed, report.card()
    ran = {r.check for r in report.results if r.status == grade.PASS}
    assert ran >= {
        "build",
        "registered",
        "forward",
        "backward",
        "saves_only_x",
        "errors",
        "opcheck",
        "compile",
        "integrity",
    }
    if CUDA:
        assert {"stream", "speed"} <= ran, report.card()


@pytest.mark.parametrize("entry", CORPUS, ids=[e.name for e in CORPUS])
def test_a_corpus_entry_is_rejected_by_its_check(entry, tmp_path):
    if entry.part == "cuda" and not CUDA:
        pytest.skip("a GPU part: only a GPU shows it")
    folder = materialize(entry, tmp_path)
    report = grade.op(folder=folder, checks=[entry.rejects], quiet=True)
    assert report.status(entry.rejects) == grade.FAIL, f"{entry.name} ({entry.why}) was not rejected:\n{report.card()}"
    if entry.rejects == "large" and report.status("large") == grade.SKIP:
        pytest.skip("not enough GPU memory for the large case")


def test_a_crash_fails_its_check_with_the_case_and_the_signal_and_the_next_checks_still_run(tmp_path):
    folder = materialize(next(e for e in CORPUS if e.name == "crashes_on_empty_rows"), tmp_path)
    report = grade.op(folder=folder, checks=["forward", "errors"], quiet=True, seed=3)
    forward = next(r for r in report.results if r.check == "forward")
    assert forward.status == grade.FAIL and "SIGFPE" in forward.detail and "[4, 0]" in forward.case, report.card()
    assert report.status("errors") == grade.PASS, report.card()
    card = report.card()
    assert (
        "case: x of shape [4, 0]" in card
        and "--seed 3" in card
        and card.rstrip().splitlines()[-2].startswith("NOT YET")
    )


def test_the_learners_empty_folder_gets_its_first_step_and_nothing_crashes():
    report = grade.op(solution=False, quiet=True)
    build = report.results[0]
    assert build.check == "build" and build.status == grade.FAIL, report.card()
    assert "swiglu.cpp" in build.detail and "README.md" in build.detail
    assert all(r.status == grade.SKIP for r in report.results[1:])


def test_the_learners_folder_holds_the_readme_only_and_it_is_the_solutions():
    mine, answer = capstone.folder(solution=False), capstone.folder(solution=True)
    assert sorted(p.name for p in mine.iterdir()) == ["README.md"]
    assert (mine / "README.md").read_text() == (answer / "README.md").read_text()
    assert all(part.present for part in capstone.files(answer)), capstone.files(answer)
    assert not any(part.present for part in capstone.files(mine))


def test_the_course_table_lists_an_exercise_done_with_the_solutions_and_not_yet_with_the_stub(monkeypatch):
    stub = grade.course(["square_fake"], capstone=False, practice=False, quiet=True)
    assert stub.rows[0][:2] == ("square_fake", grade.FAIL) and "not yet" in stub.rows[0][2], stub.table()
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    done = grade.course(["square_fake"], capstone=False, practice=False, quiet=True)
    assert done.rows[0][:2] == ("square_fake", grade.PASS), done.table()
    assert "1 of 1 done." in done.table()
