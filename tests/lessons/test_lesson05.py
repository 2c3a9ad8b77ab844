"""Lesson 05's exercise ops (kernels/rmsnorm_row/, kernels/dropout_mask/) built with the solutions: they agree
with the course's finished ops (course::rms_norm, course::dropout), float16/bfloat16 on the CPU go through the
float exercise, bad arguments name the argument, and every committed wrong answer of the dropout mask (one
function shared by the CPU and the GPU) is rejected on every device present. The self-checks in both directions
run from tests/exercises/test_exercises.py; the notebook from tests/lessons/test_notebooks.py."""

import re

import pytest
import torch
import torch.nn.functional as F

from helpers import exercises
from helpers.exercises import dropout_mask
from helpers.ops import dropout as dp
from helpers.ops import rmsnorm as rms
from tests.conftest import load_solutions


@pytest.fixture(scope="module")
def row():
    return load_solutions("rmsnorm_row")


@pytest.fixture(scope="module")
def mask():
    return load_solutions("dropout_mask")


@pytest.mark.parametrize("shape", [(1, 1), (3, 1151), (2, 5, 257), (4, 4097)])
def test_rmsnorm_row_matches_native_rms_norm_and_the_course_op(row, device, shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3 + 1).to(device)
    w = torch.randn(shape[-1], generator=g).to(device)
    y, rstd = row.forward(x, w, 1e-5)
    torch.testing.assert_close(y, F.rms_norm(x, (shape[-1],), w, 1e-5), rtol=1e-5, atol=1e-5)
    rms.register()
    torch.testing.assert_close(y, torch.ops.course.rms_norm(x, [shape[-1]], w, 1e-5), rtol=1e-5, atol=1e-5)
    assert rstd.shape == shape[:-1] and rstd.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rmsnorm_row_cpu_half_and_bf16_run_the_float_exercise(row, dtype):
    x, w = torch.randn(5, 1000).to(dtype), torch.randn(1000).to(dtype)
    y, rstd = row.forward(x, w, 1e-6)
    y32, rstd32 = row.forward(x.float(), w.float(), 1e-6)
    assert torch.equal(rstd, rstd32) and torch.equal(y, y32.to(dtype))


def test_rmsnorm_row_bad_arguments_name_the_argument(row):
    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match=re.escape("weight must have shape [8], got [7]")):
        row.forward(x, torch.randn(7), 1e-6)
    with pytest.raises(TypeError, match="weight must have the dtype of x"):
        row.forward(x, torch.randn(8, dtype=torch.float64), 1e-6)
    with pytest.raises(ValueError, match="x must have at least one dimension"):
        row.forward(torch.tensor(1.0), torch.randn(1), 1e-6)
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        row.forward(x, torch.randn(8), -1.0)
    with pytest.raises(TypeError, match="x must be float32, float64, float16 or bfloat16"):
        row.forward(x.int(), torch.randn(8), 1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 7, 4099])
def test_dropout_mask_draws_what_course_dropout_draws(mask, device, dtype, n):
    """The exercise with the (seed, offset) course::dropout returned gives course::dropout's output, bit for bit."""
    dp.register()
    x = torch.randn(n, device=device).to(dtype)
    for p in (0.1, 0.5, 0.9):
        y, state = torch.ops.course.dropout(x, p, True)
        seed, offset = (int(v) for v in state.cpu())
        assert torch.equal(mask.forward(x, p, seed, offset), y)


def test_dropout_mask_bad_arguments_name_the_argument(mask):
    x = torch.randn(8)
    with pytest.raises(ValueError, match=re.escape("must be between 0 and 1, got 1.5")):
        mask.forward(x, 1.5, 1, 0)
    with pytest.raises(ValueError, match="offset must be a multiple of 4 and >= 0, got 3"):
        mask.forward(x, 0.5, 1, 3)
    with pytest.raises(TypeError, match="x must be float32, float64, float16 or bfloat16"):
        mask.forward(x.int(), 0.5, 1, 0)


@pytest.mark.parametrize("wrong", dropout_mask.WRONG, ids=[w.why[:40] for w in dropout_mask.WRONG])
def test_every_dropout_mask_wrong_answer_fails_on_every_device(wrong, device):
    """dropout_group4 is one __host__ __device__ function: a wrong answer is wrong on the GPU too, and the
    self-check must say so there (tests/exercises/test_exercises.py checks each on its `part` only)."""
    ext = exercises.build_wrong("dropout_mask", wrong)
    with pytest.raises(AssertionError, match=re.escape("not yet")):
        dropout_mask.check(device=device, ext=ext)
