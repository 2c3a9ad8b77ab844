import os

import pytest
import torch

from helpers import env, loader

# The suite builds every op's glue (a .cpp with torch's headers) several times: for the CPU, with the stubs and
# with the solutions, once per wrong answer, again in the notebooks. The precompiled torch header halves each of
# those compiles (an op's glue on 2 cores: about 28 s without, 15 s with), and the glue exercises build it on
# CI's 2 cores anyway, so the suite uses it everywhere, as a learner's machine with 4 or more cores does. The
# path without it (Colab's 2 cores) keeps its tests: test_compile's builds (CUDA, as on Colab) and test_loader's.
os.environ.setdefault("COURSE_PCH", "1")

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
