"""Tests of course::swiglu (lesson 08's capstone: the answer's own tests). Run them from the lesson
(capstone.run_tests()) or from the course folder:

    python -m pytest kernels/exercises/swiglu/test_swiglu.py
"""

from pathlib import Path

import pytest
import torch

from helpers import capstone

HERE = Path(__file__).resolve().parent
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
LOW = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module", autouse=True)
def op():
    capstone.load(HERE)
    return torch.ops.course.swiglu


def rand(*shape, device="cpu", dtype=torch.float32):
    return (torch.randn(*shape, dtype=torch.float64) * 3).to(device=device, dtype=dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("shape", [(1, 2), (3, 14), (2, 5, 2302), (0, 8), (4, 0), (10,)])
def test_forward_matches_the_float64_reference(op, device, dtype, shape):
    x = rand(*shape, device=device, dtype=dtype)
    y = op(x)
    assert y.shape == (*shape[:-1], shape[-1] // 2) and y.dtype == dtype and y.is_contiguous()
    torch.testing.assert_close(y.double().cpu(), capstone.reference(x.cpu()), **tolerance(dtype))


def tolerance(dtype):
    # one rounding of the float result to the output dtype, and float32's own error in the math
    return {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=1e-3, atol=1e-3)}.get(
        dtype, dict(rtol=1e-2, atol=1e-2)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs_give_what_contiguous_ones_give(op, device):
    base = rand(2 * 9, 5, device=device)
    for x in (base.t(), rand(5, 40, device=device)[:, ::2], rand(1 + 5 * 18, device=device)[1:].view(5, 18)):
        torch.testing.assert_close(op(x), op(x.contiguous()), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_in_float64(op, device):
    x = rand(3, 2 * 5, device=device, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(op, (x,))
    assert torch.autograd.gradcheck(op, (rand(10, 3, device=device, dtype=torch.float64).t().requires_grad_(),))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", LOW)
def test_backward_matches_the_float64_reference(op, device, dtype):
    x = rand(6, 2 * 37, device=device, dtype=dtype).requires_grad_()
    grad_y = rand(6, 37, device=device, dtype=dtype)
    op(x).backward(grad_y)
    want = capstone.reference_grad(grad_y.cpu(), x.detach().cpu())
    torch.testing.assert_close(x.grad.double().cpu(), want, **tolerance(dtype))


def test_backward_saves_only_x(op):
    saved = []
    x = rand(4, 2 * 8).requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        op(x)
    assert len(saved) == 1 and saved[0].shape == x.shape


@pytest.mark.parametrize(
    "bad, error, name",
    [
        (lambda: rand(3, 5), ValueError, "x"),
        (lambda: torch.ones(3, 4, dtype=torch.int32), TypeError, "x"),
        (lambda: torch.tensor(1.0), ValueError, "x"),
    ],
)
def test_bad_x_gets_an_error_naming_it(op, bad, error, name):
    with pytest.raises(error, match=rf"\b{name}\b"):
        op(bad())


def test_bad_grad_y_gets_an_error_naming_it(op):
    with pytest.raises(ValueError, match=r"\bgrad_y\b"):
        torch.ops.course.swiglu_backward(rand(3, 5), rand(3, 8))
    with pytest.raises(TypeError, match=r"\bgrad_y\b"):
        torch.ops.course.swiglu_backward(rand(3, 4, dtype=torch.float64), rand(3, 8))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(op, device):
    for x in (rand(3, 2 * 5, device=device), rand(2, 3, 8, device=device).requires_grad_()):
        torch.library.opcheck(op, (x,))
    torch.library.opcheck(torch.ops.course.swiglu_backward, (rand(3, 5, device=device), rand(3, 10, device=device)))


@pytest.mark.parametrize("device", DEVICES)
def test_compiles_with_fullgraph(op, device):
    def mlp(x, w):
        return op(x @ w).sum()

    # On the CPU, the tracing that torch.compile does without generating C++ (fast); on a GPU, the full compile.
    compiled = torch.compile(mlp, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    x, w = rand(4, 8, device=device), rand(8, 2 * 6, device=device).requires_grad_()
    got = compiled(x, w)
    got.backward()
    grad = w.grad.clone()
    w.grad = None
    mlp(x, w).backward()
    torch.testing.assert_close(got, mlp(x, w))
    torch.testing.assert_close(grad, w.grad)
