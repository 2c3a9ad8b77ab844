"""Exercise 3 of lesson 04: tests for course::square, in a file that pytest runs.

    python -m pytest -q kernels/exercises/test_square_op.py

The `square` fixture below is torch.ops.course.square as a user meets it: your registration from exercise 1,
with the course's fake kernels and autograd. Write tests that pass on it and that would FAIL if the op were
broken: the self-check runs your file on the real op, then on broken versions of it (a wrong value in one
dtype, wrong values for inputs that are not contiguous, a fake kernel that describes the output wrongly, no
autograd registration, a wrong gradient). Each must make at least one of your tests fail. About 20 lines:

- sample inputs a user passes: every dtype the op takes (float32, float64, float16, bfloat16), odd sizes,
  inputs that are not contiguous, and inputs that require grad;
- a test that runs torch.library.opcheck on them (it checks the schema, the fake kernel and the autograd
  registration against the kernel: what comparing values cannot see);
- a test of the values against an independent reference (x * x in float64, rounded to x's dtype: never the op
  itself), and one of the gradient.

Check your work with the self-check cell in lesson 04: it shows pytest's output and which broken ops your tests
caught.
"""

import pytest
import torch

from helpers.exercises import square_op

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module")
def square():
    return square_op.load()


# BEGIN SOLUTION
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def sample_inputs(device, dtype, requires_grad=False):
    make = lambda *shape: torch.randn(*shape, device=device, dtype=dtype)  # noqa: E731
    xs = [make(1151), make(7, 33).t(), make(5, 8)[:, ::2], make(0, 3)]
    return [x.requires_grad_(requires_grad) for x in xs]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_values_match_x_times_x(square, device, dtype):
    for x in sample_inputs(device, dtype):
        want = (x.double() * x.double()).to(dtype)
        torch.testing.assert_close(square(x), want)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(square, device):
    for x in sample_inputs(device, torch.float32, requires_grad=True)[:3]:  # the layouts: opcheck is about them
        torch.library.opcheck(torch.ops.course.square.default, (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_gradient(square, device):
    x = torch.randn(6, 5, device=device, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(square, (x.t(),))


# END SOLUTION
