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
# corpus (tests/grade/test_grade.py: a child process and a build per entry) by entry, and the notebooks' runs
# (each independent of the others, minutes each) by notebook. Whatever
# builds a wheel in the build cache's shared folders (helpers/wheel.py: such builds wait for each other) shares
# one process: test_packaging, wheel_square's tests and lesson 06's notebooks.
BY_TEST = (
    "tests/exercises/test_exercises.py",
    "tests/grade/test_grade.py",
    "tests/lessons/test_notebooks.py",
    "tests/lessons/test_notebooks_learner.py",
)
WHEELS = ("tests/infrastructure/test_packaging.py", "wheel_square", "06_packaging")


def _group(nodeid: str) -> str:
    if any(w in nodeid for w in WHEELS):
        return "wheels"
    path = nodeid.split("::")[0]
    if path in BY_TEST and "[" in nodeid:
        params = nodeid.split("[", 1)[1].rstrip("]").split("-")
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
        """pytest-xdist's load-by-scope scheduling, with _group() as the scope of a test."""

        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return ByGroup(config, log)
