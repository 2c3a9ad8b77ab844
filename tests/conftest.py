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


# Tests that must share one process (make test runs pytest-xdist with --dist loadgroup; every other test goes
# to whichever process is free): the loader's tests build on each other; and everything that builds a wheel in
# the build cache's shared folders (helpers/wheel.py: such builds wait for each other, so spread over processes
# they would leave all but one waiting).
ONE_PROCESS = {
    "tests/infrastructure/test_loader.py": "loader",
    "tests/infrastructure/test_packaging.py": "wheels",
}
WHEELS = ("wheel_square", "06_packaging")  # lesson 06's exercise and notebook build wheels too


def pytest_collection_modifyitems(config, items):
    for item in items:
        group = ONE_PROCESS.get(item.nodeid.split("::")[0])
        if group is None and any(name in item.nodeid for name in WHEELS):
            group = "wheels"
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
