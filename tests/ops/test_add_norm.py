"""kernels/add_norm/: the fused residual add + RMSNorm / LayerNorm (lesson 05) against the unfused pair in
float64 over awkward shapes and every dtype: y and h, and the gradients of x, residual and the parameters
through y, through h and through both; rounding of h as the unfused add rounds it, broadcasting and
promotion as `x + residual`, gradcheck, long and misaligned rows on a GPU. opcheck, compile, autocast, the
second derivative and CUDA graphs: tests/ops/test_library.py."""

import pytest
import torch

from helpers import check
from helpers.ops import add_norm as an
from tests.conftest import needs_gpu

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SHAPES = [(0, 3), (1,), (3, 3), (127, 127), (5, 1151), (67, 4096), (2, 65536)]
GPU_SHAPES = [(4096, 4096), (9, 16384), (3, 32768), (40, 65536), (3, 131072)]
NORMS = {"rms": (an.add_rms_norm, an.reference_rms), "layer": (an.add_layer_norm, an.reference_layer)}


def inputs(shape, dtype, device, norm, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, r = ((torch.randn(shape, generator=g) + 0.25).to(device=device, dtype=dtype) for _ in range(2))
    params = [
        torch.randn(shape[-1], generator=g).to(device=device, dtype=dtype) for _ in range(2 if norm == "layer" else 1)
    ]
    return x, r, params


def compare(norm, x, r, params, use=("y", "h"), seed=1):
    """Ours against the unfused reference in float64 (rounded): outputs, and the gradients of every input
    through the outputs in `use` (random output gradients; the others unused)."""
    ours, ref = NORMS[norm]
    n = x.shape[-1]
    args = [t.detach().clone().requires_grad_() for t in (x, r, *params)]
    wide = [t.detach().double().requires_grad_() for t in (x, r, *params)]
    with check.poisoned():
        y, h = ours(args[0], args[1], (n,), *args[2:])
    # The unfused pair in x's dtype normalizes h rounded to that dtype: so does the reference (the rounding
    # passed straight through by the gradient, as the unfused pair's gradient passes it).
    exact = wide[0] + wide[1]
    want_h = exact + (exact.to(x.dtype).double() - exact).detach()
    want_y = ref(want_h, torch.zeros_like(exact), (n,), *wide[2:])[0]
    assert y.dtype == x.dtype and h.dtype == x.dtype and y.shape == x.shape and h.shape == x.shape
    check.assert_close(h, want_h.to(x.dtype), name="h")
    check.assert_close(y, want_y.to(x.dtype), name="y")
    g = torch.Generator().manual_seed(seed)
    outs, wants, grads = [], [], []
    for name, o, w in (("y", y, want_y), ("h", h, want_h)):
        if name in use:
            gr = torch.randn(x.shape, generator=g).to(x.device, x.dtype)
            outs, wants, grads = [*outs, o], [*wants, w], [*grads, gr]
    if not outs or x.numel() == 0:
        return
    got = torch.autograd.grad(outs, args, grads, allow_unused=True)
    want = torch.autograd.grad(wants, wide, [gr.double() for gr in grads], allow_unused=True)
    rows = x.numel() // n
    for i, (a, b) in enumerate(zip(got, want)):
        b = torch.zeros_like(args[i], dtype=torch.float64) if b is None else b
        a = torch.zeros_like(args[i]) if a is None else a
        tol = dict(rtol=1e-4, atol=1e-5 * max(rows, 10)) if i >= 2 and x.dtype == torch.float32 else {}
        check.assert_close(a, b.to(a.dtype), name=f"gradient of {['x', 'residual', 'weight', 'bias'][i]}", **tol)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_the_unfused_pair(device, norm, dtype, shape):
    compare(norm, *inputs(shape, dtype, device, norm))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("use", [("y",), ("h",)], ids=str)
def test_gradients_through_one_output(device, norm, use):
    """A gradient through y alone (h unused: no grad_h) and through h alone (grad_y zero)."""
    compare(norm, *inputs((7, 96), torch.float32, device, norm), use=use)


@needs_gpu
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(600, 16384), (150, 65536)], ids=str)
def test_long_rows_over_many_rounds_of_the_ring(norm, dtype, shape):
    """Long rows on sm_90 run forward_bulk_kernel and backward_bulk_kernel: persistent grids of clusters, each
    going round its ring of stages and its exchange slots several times (x and the residual arriving by bulk
    copy, h written from the stage)."""
    compare(norm, *inputs(shape, dtype, "cuda", norm))


@needs_gpu
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_fast_path_matches_on_the_gpu(norm, dtype, shape):
    compare(norm, *inputs(shape, dtype, "cuda", norm))


@needs_gpu
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [1024, 65536])
def test_misaligned_rows_take_the_scalar_path(norm, n):
    x, r, params = inputs((4 * n + 1,), torch.bfloat16, "cuda", norm)
    compare(norm, x[1:].view(4, n), r[:-1].view(4, n), [p[:n] for p in params])


def test_gradcheck_in_float64(device):
    x, r = (torch.randn(3, 2, 5, device=device, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w, b = (torch.randn(2, 5, device=device, dtype=torch.float64, requires_grad=True) for _ in range(2))
    assert torch.autograd.gradcheck(lambda *a: torch.stack(an.add_rms_norm(a[0], a[1], (2, 5), a[2])), (x, r, w))
    assert torch.autograd.gradcheck(lambda *a: torch.stack(an.add_layer_norm(a[0], a[1], (2, 5), *a[2:])), (x, r, w, b))
    assert torch.autograd.gradcheck(lambda x, r: an.add_rms_norm(x, r, 5)[0], (x, r))  # no weight, y only


def test_broadcast_and_promotion_like_x_plus_residual(device):
    """A residual of another dtype or a broadcastable shape, as `x + residual` takes it."""
    x = torch.randn(4, 16, device=device, dtype=torch.bfloat16, requires_grad=True)
    r = torch.randn(16, device=device, requires_grad=True)
    y, h = an.add_rms_norm(x, r, 16)
    want_y, want_h = an.reference_rms(x, r, 16)
    assert y.dtype == want_y.dtype == torch.float32 and h.shape == want_h.shape
    check.assert_close(y, want_y, name="y")
    gx, gr = torch.autograd.grad((y + h).sum(), (x, r))
    wx, wr = torch.autograd.grad(sum(t.sum() for t in an.reference_rms(x, r, 16)), (x, r))
    check.assert_close(gx, wx, name="grad x")
    check.assert_close(gr, wr, name="grad residual", rtol=1e-4, atol=1e-4)


def test_float32_parameters_beside_half_inputs(device):
    x, r, _ = inputs((5, 48), torch.bfloat16, device, "layer")
    w, b = torch.randn(48, device=device), torch.randn(48, device=device)
    compare("layer", x, r, [w, b])
    compare("rms", x, r, [w])
