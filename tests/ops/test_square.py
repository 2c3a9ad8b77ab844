"""kernels/square/: the square op, y = x * x, built with the solutions: lesson 02b's exercise (the glue,
SquareFunction and the binding, kernels/solutions/square_glue.h) over the course's kernels, against plain
PyTorch on every dtype and layout, gradcheck, empty input, bad arguments."""

import re

import pytest
import torch

from helpers import check
from tests.conftest import load_solutions

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module")
def ext():
    return load_solutions("square")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 8, 1000, 4099])
def test_forward_and_backward_match_torch(ext, device, dtype, n):
    x = torch.randn(n, device=device).to(dtype).requires_grad_()
    g = torch.randn(n, device=device).to(dtype)
    with check.poisoned():
        y = ext.square(x)
        (gx,) = torch.autograd.grad(y, x, g)
    xd = x.detach().double()
    check.assert_close(y.detach(), (xd * xd).to(dtype), name="y")
    check.assert_close(gx, (2 * xd * g.double()).to(dtype), name="grad_x")


def test_views_an_unaligned_offset_and_a_transpose(ext, device):
    x = torch.randn(1001, device=device)[1:]  # not 16-byte aligned: the one-value-per-thread kernel
    check.assert_close(ext.forward(x), x * x)
    x, g = torch.randn(33, 64, device=device).t(), torch.randn(64, 33, device=device)
    check.assert_close(ext.backward(g, x), 2 * x * g)


def test_gradcheck_and_empty(ext, device):
    assert check.gradcheck(ext.square, torch.randn(9, device=device, requires_grad=True))
    assert ext.square(torch.empty(0, 3, device=device)).shape == (0, 3)


def test_bad_arguments_are_named(ext):
    with pytest.raises(TypeError, match="x must be float32"):
        ext.forward(torch.ones(3, dtype=torch.int32))
    with pytest.raises(ValueError, match=re.escape("grad_y must have shape [3], got [4]")):
        ext.backward(torch.ones(4), torch.ones(3))
    with pytest.raises(TypeError, match="grad_y must have the dtype of x"):
        ext.backward(torch.ones(3, dtype=torch.float64), torch.ones(3))
