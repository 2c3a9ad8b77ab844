"""Tests of course::cross_entropy (lesson 09's practice op). Run them from the course folder:

    python -m pytest kernels/exercises/cross_entropy/test_cross_entropy.py

Everything is checked against F.cross_entropy in float64; CUDA cases run where a GPU is present.
"""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers import capstone

HERE = Path(__file__).resolve().parent
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
REDUCTIONS = ["none", "mean", "sum"]


@pytest.fixture(scope="module")
def side():
    module = capstone.load(HERE, name="cross_entropy")
    sys.modules[module.__name__] = module  # torch.compile looks a traced function's module up by its name
    return module


def logits(n, v, device="cpu", dtype=torch.float32, scale=3.0):
    return (torch.randn(n, v, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def targets(n, v, device="cpu", ignored=0.25):
    t = torch.randint(0, v, (n,))
    t[torch.rand(n) < ignored] = -100
    return t.to(device)


def reference(x, t, eps=0.0, reduction="mean", ignore_index=-100):
    return F.cross_entropy(
        x.double().cpu(), t.cpu(), ignore_index=ignore_index, label_smoothing=eps, reduction=reduction
    )


def tolerance(dtype):
    # one rounding of the float result to the output dtype, and float32's own error in the math
    return {
        torch.float64: dict(rtol=1e-9, atol=1e-9),
        torch.float32: dict(rtol=1e-5, atol=1e-5),
        torch.float16: dict(rtol=1e-3, atol=1e-3),
    }.get(dtype, dict(rtol=8e-3, atol=8e-3))


def close(got, want, dtype):
    torch.testing.assert_close(got.double().cpu(), want.double(), equal_nan=True, **tolerance(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (0, 5), (17, 1001), (2, 4099)])
def test_forward_matches_the_float64_reference(side, device, dtype, reduction, eps, shape):
    x, t = logits(*shape, device, dtype), targets(*shape, device)
    loss = side.cross_entropy(x, t, label_smoothing=eps, reduction=reduction)
    assert loss.dtype == dtype and loss.shape == ((shape[0],) if reduction == "none" else ())
    close(loss, reference(x, t, eps, reduction), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_lse_is_the_rows_logsumexp(device):
    x, t = logits(9, 333, device), targets(9, 333, device)
    _, lse = torch.ops.course.cross_entropy(x, t, -100, 0.0, 1)
    assert lse.dtype == torch.float32
    torch.testing.assert_close(lse.double().cpu(), torch.logsumexp(x.double().cpu(), 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_large_logits_do_not_overflow(side, device, dtype):
    scale = 3e4 if dtype == torch.float16 else 1e4
    x = ((torch.rand(5, 300, dtype=torch.float64) * 2 - 1) * scale).to(device=device, dtype=dtype)
    t = torch.randint(0, 300, (5,), device=device)
    t[0] = int(x[0].float().argmax())  # a loss near 0 from logits near 1e4
    for eps in (0.0, 0.1):
        loss = side.cross_entropy(x, t, label_smoothing=eps, reduction="none")
        assert torch.isfinite(loss).all()
        close(loss, reference(x, t, eps, "none"), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_masked_logits_add_nothing(side, device):
    x = logits(4, 50, device)
    x[:, 5:] = float("-inf")
    t = torch.randint(0, 5, (4,), device=device)
    close(side.cross_entropy(x, t, reduction="none"), reference(x, t, 0.0, "none"), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_ignored_rows_count_for_nothing(side, device):
    x = logits(6, 20, device)
    t = torch.tensor([3, -100, 5, -100, 0, 19], device=device)
    close(side.cross_entropy(x, t, reduction="none")[[1, 3]], torch.zeros(2), torch.float32)
    close(side.cross_entropy(x, t), reference(x, t), torch.float32)  # the mean over the 4 rows counted
    t3 = torch.where(t == -100, 3, t)  # ignore_index may be a class too: rows of class 3 count for nothing
    close(side.cross_entropy(x, t3, ignore_index=3), reference(x, t3, ignore_index=3), torch.float32)
    nothing = torch.full((6,), -100, device=device)
    assert torch.isnan(side.cross_entropy(x, nothing)).item()  # a mean of no rows, as F.cross_entropy
    assert side.cross_entropy(x, nothing, reduction="sum").item() == 0


@pytest.mark.parametrize("device", DEVICES)
def test_strided_logits_give_what_contiguous_ones_give(side, device):
    base = logits(7, 33, device)
    t = targets(7, 33, device)
    padded = torch.zeros(7, 40, device=device)[:, :33]
    padded.copy_(base)
    for x in (
        base.t().contiguous().t(),
        padded,
        torch.cat([torch.zeros(1, device=device), base.flatten()])[1:].view(7, 33),
    ):
        torch.testing.assert_close(
            side.cross_entropy(x, t, reduction="none"), side.cross_entropy(base, t, reduction="none")
        )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_gradcheck_in_float64(side, device, reduction, eps):
    x = logits(4, 7, device, torch.float64, scale=1.0).requires_grad_()
    t = torch.tensor([1, -100, 6, 0], device=device)
    assert torch.autograd.gradcheck(lambda a: side.cross_entropy(a, t, label_smoothing=eps, reduction=reduction), (x,))


def reference_grad(x, t, grad_loss, eps, reduction):
    xd = x.detach().double().cpu().requires_grad_()
    F.cross_entropy(xd, t.cpu(), label_smoothing=eps, reduction=reduction).backward(grad_loss.double().cpu())
    return xd.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("inplace_grad", [False, True])
def test_backward_matches_the_float64_reference(side, device, dtype, reduction, inplace_grad):
    x, t = logits(6, 301, device, dtype).requires_grad_(), targets(6, 301, device)
    want_x = x.detach().clone()
    loss = side.cross_entropy(x, t, label_smoothing=0.1, reduction=reduction, inplace_grad=inplace_grad)
    grad_loss = (torch.rand(loss.shape, dtype=torch.float64) + 0.5).to(device=device, dtype=dtype)
    (grad,) = torch.autograd.grad(loss, x, grad_loss)
    want = reference_grad(want_x, t, grad_loss, 0.1, reduction)
    # scaled to the rows' size: the mean divides every row by the rows counted
    scale = grad_loss.double().cpu().abs().max() / ((t != -100).sum().item() if reduction == "mean" else 1)
    torch.testing.assert_close(grad.double().cpu() / scale, want / scale, **tolerance(dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_the_inplace_op_writes_the_gradient_over_the_logits(side, device):
    x, t = logits(5, 77, device), targets(5, 77, device)
    x0 = x.clone()
    loss = torch.ops.course.cross_entropy_inplace_(x, t, -100, 0.1, 1)
    torch.testing.assert_close(loss, torch.ops.course.cross_entropy(x0, t, -100, 0.1, 1)[0])
    want = reference_grad(x0, t, torch.tensor(1.0), 0.1, "mean")
    torch.testing.assert_close(x.double().cpu(), want, rtol=1e-5, atol=1e-7)


def test_inplace_grad_leaves_logits_alone_when_no_gradient_is_needed(side):
    x, t = logits(5, 40), targets(5, 40)
    x0 = x.clone()
    side.cross_entropy(x, t, inplace_grad=True)
    assert torch.equal(x, x0)


def test_overwriting_logits_an_earlier_op_saved_fails_loudly(side):
    h = logits(4, 30, scale=0.5).requires_grad_()
    loss = side.cross_entropy(h.exp(), targets(4, 30), inplace_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_backward_saves_no_softmax(side):
    saved = []
    x = logits(8, 500).requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(lambda a: saved.append(a) or a, lambda a: a):
        side.cross_entropy(x, targets(8, 500))
    assert sum(a.numel() for a in saved) <= x.numel() + 2 * 8  # the logits, and a few numbers per row


@pytest.mark.parametrize(
    "call, error, name",
    [
        (lambda ce: ce(torch.ones(3, 5, dtype=torch.int32), torch.tensor([0, 1, 2])), TypeError, "logits"),
        (lambda ce: ce(torch.randn(5), torch.tensor([0])), ValueError, "logits"),
        (lambda ce: ce(torch.randn(3, 5), torch.tensor([0.0, 1.0, 2.0])), TypeError, "target"),
        (lambda ce: ce(torch.randn(3, 5), torch.tensor([0, 1])), ValueError, "target"),
        (lambda ce: ce(torch.randn(3, 5), torch.tensor([0, 5, 1])), IndexError, "target"),
        (lambda ce: ce(torch.randn(3, 5), torch.tensor([0, 1, 2]), label_smoothing=1.5), ValueError, "label_smoothing"),
        (lambda ce: ce(torch.randn(3, 5), torch.tensor([0, 1, 2]), reduction="avg"), ValueError, "reduction"),
    ],
)
def test_bad_input_gets_an_error_naming_it(side, call, error, name):
    with pytest.raises(error, match=rf"\b{name}\b"):
        call(side.cross_entropy)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(side, device):
    t = targets(6, 40, device)
    x = logits(6, 40, device)
    for args in ((x, t, -100, 0.0, 1), (x.clone().requires_grad_(), t, -100, 0.1, 0)):
        torch.library.opcheck(torch.ops.course.cross_entropy, args)
    lse = torch.logsumexp(x.float(), 1)
    torch.library.opcheck(
        torch.ops.course.cross_entropy_backward, (torch.tensor(0.5, device=device), x, t, lse, -100, 0.1, 1)
    )
    torch.library.opcheck(torch.ops.course.cross_entropy_inplace_, (x.clone(), t, -100, 0.1, 1))
    torch.library.opcheck(torch.ops.course.cross_entropy_scale_, (x.clone(), torch.rand(6, device=device)))


@pytest.mark.parametrize("device", DEVICES)
def test_compiles_with_fullgraph(side, device):
    def head(h, w, t):
        return side.cross_entropy(h @ w, t, label_smoothing=0.1)

    # On the CPU, the tracing that torch.compile does without generating C++ (fast); on a GPU, the full compile.
    compiled = torch.compile(head, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    h, w, t = (
        logits(6, 16, device, scale=0.3),
        logits(16, 50, device, scale=0.3).requires_grad_(),
        targets(6, 50, device),
    )
    got = compiled(h, w, t)
    got.backward()
    grad, w.grad = w.grad.clone(), None
    want = head(h, w, t)
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, w.grad)
