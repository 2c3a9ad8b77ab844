"""Lesson 05's exercise ops (kernels/rmsnorm_row/, kernels/dropout_mask/) built with the solutions: they agree
with native PyTorch and the course's finished ops (course::rms_norm, course::dropout), float16/bfloat16 on the
CPU go through the float exercise, bad arguments name the argument, the RMSNorm backward self-check's fixed
cancelling rows reject every sum rounded to 16 bits, and every committed wrong answer of the dropout mask (one
function shared by the CPU and the GPU) is rejected on every device present. The self-checks in both directions
run from tests/exercises/test_exercises.py; the notebook from tests/lessons/test_notebooks.py."""

import re

import pytest
import torch
import torch.nn.functional as F

from helpers import check, exercises
from helpers.exercises import dropout_mask, rmsnorm_row
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
def test_rmsnorm_row_forward_matches_native_rms_norm(row, device, shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3 + 1).to(device)
    w = torch.randn(shape[-1], generator=g).to(device)
    y, rstd = row.forward(x, w, 1e-5)
    torch.testing.assert_close(y, F.rms_norm(x, (shape[-1],), w, 1e-5), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(row.forward(x, None, 1e-5)[0], F.rms_norm(x, (shape[-1],), None, 1e-5))
    assert rstd.shape == shape[:-1] and rstd.dtype == torch.float32


@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no weight"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 1151), (2, 5, 257), (4, 4097)])
def test_rmsnorm_row_backward_matches_autograd_and_the_course_op(row, device, shape, with_weight):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3 + 1).to(device).requires_grad_()
    w = torch.randn(shape[-1], generator=g).to(device) if with_weight else None
    gy = torch.randn(shape, generator=g).to(device)
    _, rstd = row.forward(x.detach(), w, 1e-5)
    grad_x = row.backward(gy, x.detach(), rstd, w)
    (want,) = torch.autograd.grad(F.rms_norm(x, (shape[-1],), w, 1e-5), x, gy)
    torch.testing.assert_close(grad_x, want, rtol=1e-4, atol=1e-4)
    rms.register()
    (course,) = torch.autograd.grad(torch.ops.course.rms_norm(x, [shape[-1]], w, 1e-5), x, gy)
    torch.testing.assert_close(grad_x, course, rtol=1e-4, atol=1e-4)


def test_rmsnorm_row_backward_writes_into_the_grad_x_it_is_given(row, device):
    x, gy = (torch.randn(3, 33, device=device) for _ in range(2))
    w = torch.randn(33, device=device)
    _, rstd = row.forward(x, w)
    buf = torch.full((200,), 7.0, device=device)
    out = buf[50:149].view(3, 33)
    got = row.backward(gy, x, rstd, w, out)
    assert got.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, row.backward(gy, x, rstd, w))
    assert bool((buf[:50] == 7).all()) and bool((buf[149:] == 7).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rmsnorm_row_cpu_half_and_bf16_run_the_float_exercise(row, dtype):
    x, w, gy = torch.randn(5, 1000).to(dtype), torch.randn(1000).to(dtype), torch.randn(5, 1000).to(dtype)
    y, rstd = row.forward(x, w, 1e-6)
    y32, rstd32 = row.forward(x.float(), w.float(), 1e-6)
    assert torch.equal(rstd, rstd32) and torch.equal(y, y32.to(dtype))
    gx = row.backward(gy, x, rstd, w)
    assert gx.dtype == dtype and torch.equal(gx, row.backward(gy.float(), x.float(), rstd, w.float()).to(dtype))
    out = torch.empty_like(gx)
    assert torch.equal(row.backward(gy, x, rstd, w, out), gx)


def test_rmsnorm_row_bad_arguments_name_the_argument(row):
    x = torch.randn(3, 8)
    _, rstd = row.forward(x)
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
    with pytest.raises(ValueError, match=re.escape("grad_y must have shape [3, 8], got [3, 7]")):
        row.backward(torch.randn(3, 7), x, rstd)
    with pytest.raises(TypeError, match="grad_y must have the dtype of x"):
        row.backward(x.double(), x, rstd)
    with pytest.raises(TypeError, match="rstd must be Float"):
        row.backward(x, x, rstd.double())
    with pytest.raises(ValueError, match=re.escape("rstd must have shape [3], got [4]")):
        row.backward(x, x, torch.ones(4))
    with pytest.raises(ValueError, match=re.escape("weight must have shape [8], got [8, 1]")):
        row.backward(x, x, rstd, torch.ones(8, 1))
    with pytest.raises(ValueError, match="grad_x must be contiguous"):
        row.backward(x, x, rstd, None, torch.empty(8, 3).t())
    with pytest.raises(TypeError, match="grad_x must have the dtype of x"):
        row.backward(x, x, rstd, None, torch.empty(3, 8, dtype=torch.float64))
    assert row.backward(torch.empty(0, 8), torch.empty(0, 8), torch.empty(0)).shape == (0, 8)


def _half_running_sum(terms, dtype, lanes=32):
    """Lane l's running sum of terms l, l + 32, ... rounded to `dtype` at every step, the lanes added in float."""
    parts = []
    for lane in range(lanes):
        s = torch.zeros((), dtype=dtype)
        for t in terms[lane::lanes]:
            s = (s.float() + t).to(dtype)
        parts.append(s.float())
    return torch.stack(parts).sum()


@pytest.mark.parametrize("shape,dtype", [c for c in rmsnorm_row.CANCELLING if c[1] != torch.float32])
def test_rmsnorm_row_cancelling_rows_reject_every_sum_rounded_to_16_bits(shape, dtype):
    """The self-check's fixed rows, with Part 2's arithmetic written in PyTorch (32 lanes): the float sum passes;
    a sum kept in float16/bfloat16, or rounded once per lane, or a mean rounded once, fails. The rows are the
    same on every run, so the kernels that make these mistakes (WRONG) fail on every run."""
    grad_y, x, weight, rstd, eps = rmsnorm_row.cancelling_inputs(shape, dtype, "cpu")
    want = rmsnorm_row.reference(grad_y, x, weight, rstd, eps)
    n, r = shape[-1], rstd.float()[:, None]
    g, xf = grad_y.float() * weight.float(), x.float()

    def grad_x(mean_gx):
        return (r * (g - xf * r * mean_gx)).to(dtype)

    def per_row(f):
        return torch.stack([f(i) for i in range(shape[0])])[:, None]

    float_sum = per_row(lambda i: (g[i] * xf[i]).sum()) * r / n
    check.assert_close(grad_x(float_sum), want)
    rounded = {
        "running sum of g * x in T": per_row(lambda i: _half_running_sum(g[i] * xf[i], dtype)) * r / n,
        "running sum of g * xhat in T": per_row(lambda i: _half_running_sum(g[i] * xf[i] * r[i], dtype)) / n,
        "each lane's sum rounded once": per_row(
            lambda i: torch.stack([(g[i] * xf[i])[k::32].sum() for k in range(32)]).to(dtype).float().sum()
        )
        * r
        / n,
        "the mean rounded once": (float_sum).to(dtype).float(),
    }
    for why, mean_gx in rounded.items():
        with pytest.raises(AssertionError):
            check.assert_close(grad_x(mean_gx), want, name=why)


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
