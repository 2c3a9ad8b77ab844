import os

import pytest
import torch

from helpers import env, loader

CUDA = env.cuda_mode()
needs_gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (runs in `make test-gpu`)")


def devices():
    return ["cpu", "cuda"] if CUDA else ["cpu"]


@pytest.fixture(params=devices())
def device(request):
    return torch.device(request.param)


@pytest.fixture
def solutions(monkeypatch):
    """Build kernels against kernels/solutions/ for this test."""
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")


def pytest_report_header(config):
    return env.report(env.detect()) + f"\nCI={os.environ.get('CI', '')}"


def load_solutions(name: str):
    """kernels/NAME built against kernels/solutions/: what the tests of a finished op run."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_SOLUTIONS", "1")
        return loader.load(name)


# How make test spreads the tests over its processes (pytest-xdist, --dist loadgroup): a file's tests stay in
# one process, as its module fixtures (an op built and loaded once) are set up once there; but the exercises'
# file, the largest (every self-check in both directions: a quarter of the run), goes by exercise, the grader's
# corpus (tests/grade/test_grade.py: a child process and a build per entry) by entry, the notebooks' runs
# (each independent of the others, minutes each) by notebook, and the CUDA compile checks by op. Whatever
# builds a wheel in the build cache's shared folders (helpers/wheel.py: such builds wait for each other) shares
# one process: test_packaging, wheel_square's tests and lesson 06's notebooks.
BY_TEST = (
    "tests/exercises/test_exercises.py",
    "tests/grade/test_grade.py",
    "tests/grade/test_practice.py",
    "tests/lessons/test_notebooks.py",
    "tests/lessons/test_notebooks_learner.py",
    "tests/ops/test_compile.py",
)
WHEELS = ("tests/infrastructure/test_packaging.py", "wheel_square", "06_packaging")


# A group's expected length, roughly, in minutes on CI's machine: what the scheduler starts first.
def _weight(group: str) -> float:
    if group == "wheels":
        return 10
    if group == "tests/browser/test_lessons_in_browser.py":
        return 6  # JupyterLab and Chromium started once, lessons 00 and 01 run whole, three lessons' widgets
    if group.startswith("tests/lessons/test_notebooks.py::"):
        return 3
    if group.startswith(("tests/lessons/test_notebooks_learner.py::", "tests/ops/test_compile.py::")):
        return 1.5
    if group.startswith("tests/exercises/test_exercises.py::"):
        return 1
    if group.startswith("tests/grade/test_practice.py::") and ":" not in group.split("::", 1)[1]:
        return 1.5  # an op's solution, its learner's folder and its own tests
    return 0.5


def _group(nodeid: str) -> str:
    if any(w in nodeid for w in WHEELS):
        return "wheels"
    path = nodeid.split("::")[0]
    if path in BY_TEST and "[" in nodeid:
        params = nodeid.split("[", 1)[1].rstrip("]").split("-")
        if {"stubs", "solutions"} & set(params):  # test_compile: an op's two builds share its build folder
            return f"{path}::{'-'.join(p for p in params if p not in ('stubs', 'solutions'))}"
        return f"{path}::{params[1] if params[0] in ('cpu', 'cuda') else params[0]}"  # the exercise, entry or notebook
    return path


# The groups are handed to pytest-xdist as a scheduler of our own, not as xdist_group markers: pytest-xdist 3.8
# marks a group by renaming the test's nodeid, which pytest 9 no longer allows (Node.nodeid is derived), so with
# markers the tests went out one by one, and a file whose tests build on each other (test_loader.py) was split.
@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        """pytest-xdist's load-by-scope scheduling, with _group() as the scope of a test, and the longest groups
        handed out first (a long one started last would run on alone at the end)."""

        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

        def _assign_work_unit(self, node) -> None:
            if self.workqueue:
                longest = max(self.workqueue, key=lambda scope: (_weight(scope), len(self.workqueue[scope])))
                self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return ByGroup(config, log)
