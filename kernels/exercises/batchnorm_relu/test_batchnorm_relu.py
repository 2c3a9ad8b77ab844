"""Tests of course::batchnorm_relu (lesson 09's practice set: the answer's own tests). From the course folder:

python -m pytest kernels/exercises/batchnorm_relu/test_batchnorm_relu.py
"""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers import capstone

HERE = Path(__file__).resolve().parent
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
FORMATS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}


@pytest.fixture(scope="module")
def side():
    return capstone.load(HERE, name="batchnorm_relu")


def params(c, device, dtype):
    """weight, bias, running_mean, running_var: float32, or float64 beside a float64 x."""
    pd = torch.float64 if dtype == torch.float64 else torch.float32
    g = torch.Generator().manual_seed(c)
    w, b, rm = (torch.randn(c, generator=g, dtype=torch.float64) for _ in range(3))
    rv = torch.rand(c, generator=g, dtype=torch.float64) + 0.5
    return [t.to(device=device, dtype=pd) for t in (w, b, rm, rv)]


def rand(shape, device, dtype, fmt="nchw", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 2 + torch.linspace(-3, 3, shape[1]).view(1, -1, 1, 1)
    return x.to(device=device, dtype=dtype).contiguous(memory_format=FORMATS[fmt])


def tolerance(dtype):
    # one rounding of the float result to the output dtype, and float32's own error in the math
    return {
        torch.float64: dict(rtol=1e-9, atol=1e-9),
        torch.float32: dict(rtol=1e-5, atol=1e-5),
        torch.float16: dict(rtol=1e-3, atol=2e-3),
    }.get(dtype, dict(rtol=1e-2, atol=1e-2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
# (8, 3, 64, 64): on a GPU, each channel's 32768 values are cut into several chunks, merged afterwards
@pytest.mark.parametrize(
    "shape", [(2, 3, 5, 7), (1, 1, 1, 2), (4, 16, 1, 1), (3, 32, 8, 8), (8, 5, 3, 2), (8, 3, 64, 64)]
)
def test_forward_and_running_stats_match_batchnorm2d_in_training(side, device, dtype, fmt, shape):
    x = rand(shape, device, dtype, fmt)
    w, b, rm, rv = params(shape[1], device, dtype)
    bn = torch.nn.BatchNorm2d(shape[1], momentum=0.1, eps=1e-5).double().train()
    with torch.no_grad():
        bn.weight.copy_(w), bn.bias.copy_(b), bn.running_mean.copy_(rm), bn.running_var.copy_(rv)
    y = side.batchnorm_relu(x, w, b, rm, rv, momentum=0.1, eps=1e-5)
    want = F.relu(bn(x.double().cpu()))
    assert y.shape == x.shape and y.dtype == dtype
    assert y.is_contiguous(memory_format=FORMATS[fmt])
    torch.testing.assert_close(y.double().cpu(), want, **tolerance(dtype))
    torch.testing.assert_close(rm.double().cpu(), bn.running_mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rv.double().cpu(), bn.running_var, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_a_channel_with_a_large_mean_keeps_its_variance(side, device):
    # E[x^2] - mean^2 in float would lose the variance here: the mean is 1000 times the spread
    x = (torch.randn(4, 2, 16, 16, dtype=torch.float64) + 1000).float().to(device)
    w, b, rm, rv = params(2, device, torch.float32)
    _, mean, rstd = torch.ops.course.batchnorm_relu(x, w, b, rm, rv, 0.1, 1e-5)
    var = x.double().cpu().var((0, 2, 3), unbiased=False)
    torch.testing.assert_close(rstd.double().cpu(), 1 / torch.sqrt(var + 1e-5), rtol=1e-3, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_an_empty_batch_leaves_the_running_stats(side, device):
    x = torch.empty(0, 4, 5, 5, device=device)
    w, b, rm, rv = params(4, device, torch.float32)
    rm0, rv0 = rm.clone(), rv.clone()
    y = side.batchnorm_relu(x, w, b, rm, rv)
    assert y.shape == x.shape and torch.equal(rm, rm0) and torch.equal(rv, rv0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_gradcheck_in_float64(side, device, fmt):
    x = rand((3, 4, 3, 5), device, torch.float64, fmt).requires_grad_()
    w, b, rm, rv = params(4, device, torch.float64)
    w.requires_grad_(), b.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w, b: side.batchnorm_relu(x, w, b, rm, rv), (x, w, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", FORMATS)
def test_backward_matches_native_autograd(side, device, dtype, fmt):
    x = rand((4, 8, 6, 6), device, dtype, fmt).requires_grad_()
    w, b, rm, rv = params(8, device, dtype)
    w.requires_grad_(), b.requires_grad_()
    grad_y = rand((4, 8, 6, 6), device, dtype, fmt, seed=1)
    y = side.batchnorm_relu(x, w, b, rm, rv)
    y.backward(grad_y)
    # native in float64 with the same ReLU mask as ours (y > 0): away from the kink both are the same function
    xd, wd, bd = (t.detach().double().cpu().requires_grad_() for t in (x, w, b))
    z = F.batch_norm(xd, None, None, wd, bd, training=True, eps=1e-5)
    (z * (y.detach().double().cpu() > 0)).backward(grad_y.double().cpu())
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(x.grad.double().cpu(), xd.grad, **tol)
    torch.testing.assert_close(w.grad.double().cpu(), wd.grad, **tol)
    torch.testing.assert_close(b.grad.double().cpu(), bd.grad, **tol)


@pytest.mark.parametrize(
    "make, error, name",
    [
        (lambda: (torch.randn(2, 3, 4), *params(3, "cpu", torch.float32)), ValueError, "x"),
        (lambda: (torch.randn(1, 3, 1, 1), *params(3, "cpu", torch.float32)), ValueError, "x"),
        (lambda: (torch.randn(2, 3, 4, 4), torch.ones(4), *params(3, "cpu", torch.float32)[1:]), ValueError, "weight"),
        (lambda: (torch.randn(2, 3, 4, 4), *params(3, "cpu", torch.float64)), TypeError, "weight"),
    ],
)
def test_bad_input_gets_an_error_naming_it(side, make, error, name):
    with pytest.raises(error, match=rf"\b{name}\b"):
        side.batchnorm_relu(*make())


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(side, device):
    for fmt, grad in (("nchw", False), ("channels_last", True)):
        x = rand((2, 4, 3, 3), device, torch.float32, fmt).requires_grad_(grad)
        w, b, rm, rv = params(4, device, torch.float32)
        args = (x, w.requires_grad_(grad), b.requires_grad_(grad), rm, rv, 0.1, 1e-5)
        torch.library.opcheck(torch.ops.course.batchnorm_relu, args)
        y, mean, rstd = torch.ops.course.batchnorm_relu(*args)
        torch.library.opcheck(
            torch.ops.course.batchnorm_relu_backward,
            (torch.ones_like(y), y.detach(), x.detach(), w.detach(), mean, rstd),
        )


@pytest.mark.parametrize("device", DEVICES)
def test_compiles_with_fullgraph_and_updates_the_running_stats(side, device):
    def step(x, w, b, rm, rv):
        return torch.ops.course.batchnorm_relu(x * 2, w, b, rm, rv, 0.1, 1e-5)[0].square().sum()

    # On the CPU, the tracing that torch.compile does without generating C++ (fast); on a GPU, the full compile.
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    x = rand((3, 4, 5, 5), device, torch.float32, "channels_last").requires_grad_()
    w, b, rm, rv = params(4, device, torch.float32)
    rm2, rv2 = rm.clone(), rv.clone()
    got = compiled(x, w, b, rm, rv)
    got.backward()
    grad, x.grad = x.grad.clone(), None
    want = step(x, w, b, rm2, rv2)
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, x.grad)
    torch.testing.assert_close(rm, rm2)
    torch.testing.assert_close(rv, rv2)


@pytest.mark.parametrize("bias", [True, False])
def test_fold_conv_bn_matches_fuse_conv_bn_eval(side, bias):
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 6, 3, padding=1, bias=bias).double().eval()
    bn = torch.nn.BatchNorm2d(6).double().eval()
    with torch.no_grad():
        bn.running_mean.normal_(), bn.running_var.uniform_(0.5, 2), bn.weight.normal_(), bn.bias.normal_()
    fused = side.fold_conv_bn(conv, bn)
    ref = fuse_conv_bn_eval(conv, bn)
    torch.testing.assert_close(fused.weight, ref.weight)
    torch.testing.assert_close(fused.bias, ref.bias)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), bn(conv(x)))
