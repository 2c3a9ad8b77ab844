"""kernels/layernorm.exercises.*: the paths that run lesson 03's exercises (forward v2, backward v1's grad_x).
On the CPU, float16 and bfloat16 go through the float version of the learner's Part 1: the same bits as
computing in float32 and rounding once."""

import pytest
import torch

from tests.conftest import load_solutions


@pytest.fixture(scope="module")
def ext():
    return load_solutions("layernorm")


def _inputs(m, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, n, generator=g) * 3 + 1).to(dtype)
    w, b = (torch.randn(n, generator=g).to(dtype) for _ in range(2))
    gy = torch.randn(m, n, generator=g).to(dtype)
    return x, w, b, gy


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 33, 1024])
def test_cpu_half_and_bf16_run_the_float_exercise(ext, dtype, n):
    x, w, b, gy = _inputs(5, n, dtype)
    y, mean, rstd = ext.forward(x, w, b, 1e-5, 2)
    y32, mean32, rstd32 = ext.forward(x.float(), w.float(), b.float(), 1e-5, 2)
    assert torch.equal(mean, mean32) and torch.equal(rstd, rstd32)
    gx = ext.backward(gy, x, mean, rstd, w, 1)[0]
    gx32 = ext.backward(gy.float(), x.float(), mean, rstd, w.float(), 1)[0]
    assert torch.equal(gx, gx32.to(dtype))


def test_cpu_backward_v1_matches_v2(ext):
    """v1 (the exercise's grad_x, given column sums) and v2 (the course's CPU loop) agree."""
    x, w, b, gy = _inputs(7, 129, torch.float64)
    _, mean, rstd = ext.forward(x, w, b, 1e-5)
    for a, c in zip(ext.backward(gy, x, mean, rstd, w, 1), ext.backward(gy, x, mean, rstd, w, 2)):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)
