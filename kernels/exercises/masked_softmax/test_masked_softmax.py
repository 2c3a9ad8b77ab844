"""Tests of course::masked_softmax (lesson 09, the practice set). Run them from the course folder:

    python -m pytest kernels/exercises/masked_softmax/test_masked_softmax.py

The reference is native PyTorch in float64: the scores scaled, masked_fill with -inf where a mask drops the key
(causal as scaled_dot_product_attention's is_causal: ones(Lq, Lk).tril()), torch.softmax, and zeros for a row with
no key kept (where native softmax gives NaN).
"""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers import capstone

HERE = Path(__file__).resolve().parent
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
LOW = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module", autouse=True)
def side():
    return capstone.load(HERE, name="masked_softmax")


def reference(x, mask=None, scale=1.0, causal=False):
    z = x.detach().double().cpu() * scale
    kept = torch.ones(z.shape, dtype=torch.bool)
    if causal:
        kept &= torch.ones(z.shape[-2], z.shape[-1], dtype=torch.bool).tril()
    if mask is not None:
        kept &= mask.cpu().reshape(z.shape[0], *([1] * (z.dim() - 2)), z.shape[-1])
    y = torch.softmax(z.masked_fill(~kept, -math.inf), dim=-1)
    return torch.where(kept.any(dim=-1, keepdim=True), y, torch.zeros_like(y))


def tolerance(dtype):
    return {torch.float32: dict(rtol=2e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=1e-3)}.get(
        dtype, dict(rtol=1.6e-2, atol=8e-3)
    )


def rand(*shape, device="cpu", dtype=torch.float32, scale=3.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def padding(B, Lk, device="cpu"):
    """A key padding mask with every kind of row: a random one, a prefix, none kept."""
    mask = torch.rand(B, Lk) > 0.3
    if B > 1:
        mask[1] = torch.arange(Lk) < max(1, Lk // 2)
    if B > 2:
        mask[2] = False
    return mask.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize(
    "shape, masked, causal, scale",
    [
        ((2, 3, 4, 4), True, False, 1.0),
        ((3, 2, 5, 5), True, True, 0.125),
        ((2, 2, 7, 3), False, True, 1.0),  # Lq > Lk
        ((3, 1, 3, 33), True, True, 2.5),
        ((3, 2, 9, 1000), True, True, 1 / math.sqrt(64)),
        ((1, 1, 3, 4097), False, False, -0.5),
        ((5, 31), True, False, 1.0),
        ((7,), False, False, 1.0),
        ((0, 2, 3, 4), True, True, 1.0),
        ((2, 2, 3, 0), True, False, 1.0),
    ],
)
def test_forward_matches_the_float64_reference(side, device, dtype, shape, masked, causal, scale):
    x = rand(*shape, device=device, dtype=dtype)
    mask = padding(shape[0], shape[-1], device) if masked else None
    y = side.masked_softmax(x, mask, scale, causal)
    assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
    torch.testing.assert_close(y.double().cpu(), reference(x, mask, scale, causal), **tolerance(dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_causal_matches_scaled_dot_product_attention(side, device):
    q, k = rand(2, 3, 5, 8, device=device, scale=1), rand(2, 3, 9, 8, device=device, scale=1)
    v = torch.eye(9, device=device).expand(2, 3, 9, 9)  # attention @ identity: the weights themselves
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    got = side.masked_softmax(q @ k.transpose(-1, -2), None, 8**-0.5, True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_large_scores_do_not_overflow(side, device):
    x = torch.tensor([[1000.0, 999.0, -1000.0], [30000.0, 30000.0, 0.0]], device=device)
    y = side.masked_softmax(x).cpu()
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, reference(x).float())


@pytest.mark.parametrize("device", DEVICES)
def test_a_row_with_no_key_kept_is_zeros(side, device):
    x = rand(3, 2, 4, 6, device=device)
    mask = padding(3, 6, device)
    mask[:2, 0] = True  # with causal, query 0 sees key 0 alone: kept here, so only batch 2 has rows with none
    y = side.masked_softmax(x, mask, 1.0, True)
    assert torch.equal(y[2], torch.zeros_like(y[2]))
    assert torch.allclose(y[:2].sum(-1), torch.ones(2, 2, 4, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs_give_what_contiguous_ones_give(side, device):
    mask = padding(2, 9, device)
    for x in (rand(2, 3, 9, 5, device=device).transpose(-1, -2), rand(2, 3, 5, 18, device=device)[..., ::2]):
        torch.testing.assert_close(
            side.masked_softmax(x, mask, 0.5, True),
            side.masked_softmax(x.contiguous(), mask, 0.5, True),
            rtol=0,
            atol=0,
        )
    wide = torch.zeros(2, 18, dtype=torch.bool, device=device)
    wide[:, ::2] = mask
    x = rand(2, 3, 5, 9, device=device)
    torch.testing.assert_close(
        side.masked_softmax(x, wide[:, ::2], 1.0, False), side.masked_softmax(x, mask, 1.0, False)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_in_float64(side, device):
    x = rand(3, 2, 4, 5, device=device, dtype=torch.float64, scale=1).requires_grad_()
    mask = padding(3, 5, device)
    assert torch.autograd.gradcheck(lambda t: side.masked_softmax(t, mask, 0.7, True), (x,))
    assert torch.autograd.gradcheck(lambda t: side.masked_softmax(t, None, -1.5, False), (x,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("Lk", [37, 1000, 2051])
def test_backward_matches_the_float64_reference(side, device, dtype, Lk):
    x = rand(2, 2, 5, Lk, device=device, dtype=dtype).requires_grad_()
    mask = padding(2, Lk, device)
    grad_y = rand(2, 2, 5, Lk, device=device, dtype=dtype)
    side.masked_softmax(x, mask, 0.25, True).backward(grad_y)
    xd = x.detach().double().cpu().requires_grad_()
    z = (xd * 0.25).masked_fill(~(torch.ones(5, Lk, dtype=torch.bool).tril() & mask.cpu()[:, None, None, :]), -math.inf)
    torch.softmax(z, dim=-1).nan_to_num(0.0).backward(grad_y.double().cpu())
    torch.testing.assert_close(x.grad.double().cpu(), xd.grad.nan_to_num(0.0), **tolerance(dtype))


def test_backward_saves_only_y(side):
    saved = []
    x = rand(2, 3, 4, 8).requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = side.masked_softmax(x, padding(2, 8), 0.5, True)
    assert len(saved) == 1 and saved[0].untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


@pytest.mark.parametrize(
    "call, error, name",
    [
        (lambda op: op(torch.ones(3, 4, dtype=torch.int32), None, 1.0, False), TypeError, "x"),
        (lambda op: op(torch.tensor(1.0), None, 1.0, False), ValueError, "x"),
        (lambda op: op(torch.randn(5), None, 1.0, True), ValueError, "x"),
        (lambda op: op(torch.randn(2, 3, 4), torch.ones(2, 4), 1.0, False), TypeError, "key_padding_mask"),
        (
            lambda op: op(torch.randn(2, 3, 4), torch.ones(2, 5, dtype=torch.bool), 1.0, False),
            ValueError,
            "key_padding_mask",
        ),
        (
            lambda op: op(torch.randn(2, 3, 4), torch.ones(3, 4, dtype=torch.bool), 1.0, False),
            ValueError,
            "key_padding_mask",
        ),
        (lambda op: op(torch.randn(2, 3, 4), None, math.nan, False), ValueError, "scale"),
    ],
)
def test_bad_input_gets_an_error_naming_it(side, call, error, name):
    with pytest.raises(error, match=rf"\b{name}\b"):
        call(torch.ops.course.masked_softmax)


def test_bad_grad_y_gets_an_error_naming_it(side):
    backward = torch.ops.course.masked_softmax_backward
    with pytest.raises(ValueError, match=r"\bgrad_y\b"):
        backward(rand(2, 5), rand(2, 4), 1.0)
    with pytest.raises(TypeError, match=r"\bgrad_y\b"):
        backward(rand(2, 4, dtype=torch.float64), rand(2, 4), 1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_mask_on_another_device_gets_an_error_naming_it(side):
    with pytest.raises(RuntimeError, match=r"\bkey_padding_mask\b"):
        side.masked_softmax(rand(2, 3, 4, device="cuda"), torch.ones(2, 4, dtype=torch.bool), 1.0, False)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(side, device):
    op = torch.ops.course.masked_softmax
    for args in (
        (rand(2, 3, 4, 5, device=device), None, 1.0, False),
        (rand(2, 3, 4, 5, device=device).requires_grad_(), padding(2, 5, device), 0.5, True),
        (rand(3, 9, 4, device=device, dtype=torch.bfloat16).transpose(-1, -2), padding(3, 9, device), 2.0, True),
    ):
        torch.library.opcheck(op, args)
    torch.library.opcheck(
        torch.ops.course.masked_softmax_backward, (rand(2, 7, device=device), rand(2, 7, device=device), 0.5)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_compiles_with_fullgraph(side, device):
    def attention(q, k, v, mask):  # the op through torch.ops, as a model that imports it calls it
        return (torch.ops.course.masked_softmax(q @ k.transpose(-1, -2), mask, 0.25, True) @ v).sum()

    # On the CPU, the tracing that torch.compile does without generating C++ (fast); on a GPU, the full compile.
    compiled = torch.compile(attention, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    q, k, v = (rand(2, 2, 6, 8, device=device, scale=0.5).requires_grad_() for _ in range(3))
    mask = padding(2, 6, device)
    got = compiled(q, k, v, mask)
    got.backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    want = attention(q, k, v, mask)
    want.backward()
    torch.testing.assert_close(got, want)
    for g, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(g, t.grad)
