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


# TODO(exercise): your code here (the solution is 19 lines).
raise NotImplementedError("exercise: your code here")
