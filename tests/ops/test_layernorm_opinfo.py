"""PyTorch's own sample inputs for F.layer_norm (the OpInfo `nn.functional.layer_norm` of
torch.testing._internal.common_methods_invocations.op_db) through ours, helpers.ops.layernorm's
layer_norm_like_native (torch.ops.course.layer_norm with F.layer_norm's arguments): the output and the
gradient of every input that requires grad against native, in every dtype the OpInfo lists, on the CPU and
(with a GPU) CUDA. A sample we do not support must be refused with an error naming what is unsupported:
UNSUPPORTED lists them with the error. And a second derivative is an error naming the op, never zeros."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.common_methods_invocations import op_db  # needs expecttest (requirements.txt)

from helpers import check
from helpers.ops import layernorm as ln

OPINFO = next(op for op in op_db if op.name == "nn.functional.layer_norm" and op.variant_test_name == "")
OURS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}  # kernels/common/checks.h's check_floating


def _describe(sample) -> str:
    args = [sample.input, *sample.args]
    shapes = ["x".join(map(str, a.shape)) if isinstance(a, torch.Tensor) else str(a) for a in args]
    return "-".join(shapes) + "".join(f"-{k}={v}" for k, v in sample.kwargs.items())


def _samples(device, dtype):
    return list(OPINFO.sample_inputs(device, dtype, requires_grad=True))


SAMPLES = [_describe(s) for s in _samples("cpu", torch.float32)]  # the same shapes in every dtype

# A sample whose arguments we refuse: a substring of its description -> the error's type and message.
# A negative eps (F.layer_norm takes it: rsqrt(var + eps) is NaN wherever var < -eps) is refused as
# kernels/layernorm/layernorm.cpp refuses it everywhere.
UNSUPPORTED = {"eps=-0.5": (ValueError, "eps must be a finite number >= 0, got -0.5")}

# Values are compared with native in float64 on the same inputs, rounded to the sample's dtype (native in
# the sample's dtype gives the dtypes and shapes to match): both compute in float and round once, but in
# other orders, and where the exact answer cancels to about 0 (grad_x of a row of 1 or 2 values) native's
# own float32 answer is off by 1e-4 (rstd = 316 times a rounding error), so it cannot be the yardstick.
TOLERANCES = {
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
}


def _unsupported(description: str):
    return next((v for k, v in UNSUPPORTED.items() if k in description), None)


def _leaves(sample):
    """The sample's (input, normalized_shape, weight, bias, eps) as fresh leaves, for ours and for native."""
    args = [sample.input, *sample.args]
    args += [None] * (4 - len(args))  # weight and bias default to None
    x, shape, w, b = (
        a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args
    )
    return x, shape, w, b, sample.kwargs.get("eps", 1e-5)


def test_the_opinfo_dtypes_are_ours_and_its_samples_are_all_here():
    """Every dtype the OpInfo runs layer_norm in is one we support (a new one would show up here), and the
    list below is what the tests run (a sample PyTorch adds shows up as a new test)."""
    for device in ("cpu", "cuda"):
        assert OPINFO.supported_dtypes(device) <= OURS, OPINFO.supported_dtypes(device) - OURS
    assert len(SAMPLES) >= 6, SAMPLES
    assert any("eps" in s for s in SAMPLES) and any(s.count("-") == 1 for s in SAMPLES), "no default-argument sample"


@pytest.mark.parametrize("dtype", sorted(OPINFO.supported_dtypes("cpu"), key=str), ids=str)
@pytest.mark.parametrize("index", range(len(SAMPLES)), ids=SAMPLES)
def test_opinfo_sample_matches_native(device, dtype, index):
    sample = _samples(device, dtype)[index]
    assert _describe(sample) == SAMPLES[index]
    x, shape, w, b, eps = _leaves(sample)
    refused = _unsupported(SAMPLES[index])
    if refused is not None:
        exc, message = refused
        with pytest.raises(exc, match=re.escape(message)):
            ln.layer_norm_like_native(x, shape, w, b, eps)
        return
    nx, _, nw, nb, _ = _leaves(sample)  # native in the sample's dtype: the dtypes and shapes to match
    wide = [t.detach().double().requires_grad_(t.requires_grad) if t is not None else None for t in (nx, nw, nb)]
    with check.poisoned():
        y = ln.layer_norm_like_native(x, shape, w, b, eps)
    native = F.layer_norm(nx, shape, nw, nb, eps)
    exact = F.layer_norm(wide[0], shape, wide[1], wide[2], eps)
    tol = TOLERANCES[dtype]
    assert y.dtype == native.dtype and y.shape == native.shape and y.is_contiguous()
    check.assert_close(y, exact.to(dtype), name="output", **tol)
    ours = [t for t in (x, w, b) if t is not None and t.requires_grad]
    theirs = [t for t in (nx, nw, nb) if t is not None and t.requires_grad]
    theirs_wide = [t for t in wide if t is not None and t.requires_grad]
    grad_y = torch.randn(y.shape, generator=torch.Generator().manual_seed(index)).to(device, dtype)
    with check.poisoned():
        got = torch.autograd.grad(y, ours, grad_y)
    native_grads = torch.autograd.grad(native, theirs, grad_y)
    exact_grads = torch.autograd.grad(exact, theirs_wide, grad_y.double())
    # grad_x is rstd times O(1) sums: its rounding error grows with rstd, up to 1/sqrt(eps) (316 for a row of
    # one value, whose exact gradient is 0 and whose float32 one is a product's rounding error times 316)
    rstd = torch.ops.course.layer_norm_forward(x.detach(), shape, None, None, eps)[2]
    grow = max(1.0, float(rstd.max())) if rstd.numel() else 1.0
    for name, g, n, e in zip(("x", "weight", "bias"), got, native_grads, exact_grads):
        assert g.dtype == n.dtype and g.shape == n.shape, name
        t = dict(rtol=tol["rtol"], atol=tol["atol"] * grow) if name == "x" else tol
        check.assert_close(g, e.to(g.dtype), name=f"gradient of {name}", **t)


@pytest.mark.parametrize("index", [i for i, s in enumerate(SAMPLES) if not _unsupported(s)], ids=lambda i: SAMPLES[i])
def test_second_derivative_is_an_error_naming_the_op(device, index):
    """gradgradcheck (create_graph=True, then differentiate the gradients) raises, naming course::layer_norm:
    the backward kernel is not differentiable, and silently zero second derivatives would be wrong."""
    x, shape, w, b, eps = _leaves(_samples(device, torch.float64)[index])
    inputs = [t for t in (x, w, b) if t is not None]

    def fn(*ts):
        it = iter(ts)
        return ln.layer_norm_like_native(
            next(it), shape, next(it) if w is not None else None, next(it) if b is not None else None, eps
        )

    assert torch.autograd.gradcheck(fn, inputs)
    with pytest.raises(RuntimeError, match=re.escape("course::layer_norm has no double backward")):
        torch.autograd.gradgradcheck(fn, inputs)
