"""kernels/square/: lesson 02's exercise op, y = x * x as a C++ autograd Function, built with the
solutions: both versions against plain PyTorch on every dtype, gradcheck, empty input, bad arguments."""

import re

import pytest
import torch

from helpers import check
from tests.conftest import load_solutions

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module")
def ext():
    return load_solutions("square")


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 8, 1000, 4099])
def test_forward_and_backward_match_torch(ext, device, dtype, n, version):
    x = torch.randn(n, device=device).to(dtype).requires_grad_()
    g = torch.randn(n, device=device).to(dtype)
    with check.poisoned():
        y = ext.square(x, version)
        (gx,) = torch.autograd.grad(y, x, g)
    xd = x.detach().double()
    check.assert_close(y.detach(), (xd * xd).to(dtype), name="y")
    check.assert_close(gx, (2 * xd * g.double()).to(dtype), name="grad_x")


def test_an_unaligned_view_takes_the_one_value_path(ext, device):
    x = torch.randn(1001, device=device)[1:]  # not 16-byte aligned
    check.assert_close(ext.forward(x, 2), x * x)


def test_gradcheck_and_empty(ext, device):
    assert check.gradcheck(ext.square, torch.randn(9, device=device, requires_grad=True))
    assert ext.square(torch.empty(0, 3, device=device)).shape == (0, 3)


def test_bad_arguments_are_named(ext):
    with pytest.raises(TypeError, match="x must be float32"):
        ext.forward(torch.ones(3, dtype=torch.int32))
    with pytest.raises(ValueError, match=re.escape("grad_y must have shape [3], got [4]")):
        ext.backward(torch.ones(4), torch.ones(3))
    with pytest.raises(ValueError, match="version must be between 1 and 2"):
        ext.forward(torch.ones(3), 3)
