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
