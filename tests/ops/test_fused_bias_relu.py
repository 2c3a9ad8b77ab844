"""kernels/fused_bias_relu/: CPU and (on a GPU) CUDA paths against plain PyTorch, gradients, memory
variants, in place, the layer, bad input; and (lesson 04) the registered ops torch.ops.course.fused_bias_relu,
_bits, _backward_bits and fused_bias_relu_: opcheck, torch.compile, mixed dtypes and autocast against native,
the second derivative's error, CUDA graph capture."""

import re

import pytest
import torch
from torch import nn

from helpers import check, env, library
from helpers.ops import fused_bias_relu as fbr
from tests.conftest import load_solutions, needs_gpu

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# C = 1, 3, 1151 (not a multiple of any Pack), 64 and 256 (16-byte Packs), 20 (Packs for float32, not for
# 16-bit types); row counts that are not multiples of a block's rows.
SHAPES = [(1,), (3,), (1151,), (513, 1), (17, 3), (9, 1151), (2, 3, 5), (7, 129), (65, 64), (300, 20), (3, 5, 256)]
SCALE = 1.75


def test_kernel_file_header_names_every_launcher_and_kernel():
    """kernels/fused_bias_relu/fused_bias_relu.cu opens with an index (version -> kernel / launcher): every launcher declared in
    fused_bias_relu.h is in it, and every kernel it names exists (in the .cu or the exercise's solution)."""
    header = (env.KERNELS / "fused_bias_relu/fused_bias_relu.h").read_text()
    index = (env.KERNELS / "fused_bias_relu/fused_bias_relu.cu").read_text().split("#include")[0]
    sources = (env.KERNELS / "fused_bias_relu/fused_bias_relu.cu").read_text() + (
        env.KERNELS / "solutions" / "bias_grad.cuh"
    ).read_text()
    launchers = set(re.findall(r"\b(fbr_\w+)\(", header))
    assert launchers and all(name in index for name in launchers), sorted(n for n in launchers if n not in index)
    for kernel in re.findall(r"\b(\w+_kernel)\b", index):
        assert re.search(rf"__global__ void (FBR_\w+ )?{kernel}\(", sources), f"the index names {kernel}, not defined"


@pytest.fixture(scope="module")
def ext():
    return load_solutions("fused_bias_relu")


@pytest.fixture(scope="module")
def ops(ext):
    """torch.ops.course with the op's fake kernels registered (helpers' register(), on the solutions' build)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_SOLUTIONS", "1")
        fbr.register()
    return torch.ops.course


def inputs(shape, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(shape[-1], generator=g).to(device=device, dtype=dtype)
    grad_y = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return x, b, grad_y


def autograd_reference(x, b, grad_y, scale=SCALE):
    """grad_x and grad_bias from torch's autograd in float64, rounded to x's dtype."""
    xd, bd = x.double().requires_grad_(), b.double().requires_grad_()
    fbr.reference(xd, bd, scale).backward(grad_y.double())
    return xd.grad.to(x.dtype), bd.grad.to(x.dtype)


def bias_tol(x):
    """grad_bias adds x.numel() / C terms in float32: allow for the rounding of that many additions."""
    rows = x.numel() // x.shape[-1]
    return dict(rtol=1e-5, atol=1e-6 * rows) if x.dtype == torch.float32 else {}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_reference(ext, device, dtype, shape):
    x, b, _ = inputs(shape, dtype, device)
    with check.poisoned():
        y1 = ext.forward(x, b, SCALE, 1)
        y2 = ext.forward(x, b, SCALE, 2)
        y3 = ext.forward(x, b, SCALE, 3)
        yd = ext.forward(x, b, SCALE)
        ym, mask = ext.forward_mask(x, b, SCALE)
    want = fbr.expected(x, b, SCALE)
    check.assert_close(y1, want, name="y (v1)")
    check.assert_close(y2, want, name="y (v2)")
    check.assert_close(y3, want, name="y (v3)")
    assert torch.equal(yd, y3)  # v3 is the default
    check.assert_close(ym, want, name="y (forward_mask)")
    assert mask.dtype == torch.bool and torch.equal(mask, (x.double() * SCALE + b.double()) > 0)
    with check.poisoned():
        yb, bits = ext.forward_bits(x, b, SCALE)
    assert torch.equal(yb, y3)
    assert bits.dtype == torch.int32 and torch.equal(bits, pack_bits(mask))


def pack_bits(mask):
    """The bit mask layout of forward_bits, built in PyTorch: bit e % 32 of word e / 32."""
    flat = mask.flatten().to(torch.int64)
    flat = torch.cat([flat, flat.new_zeros(-flat.numel() % 32)]).view(-1, 32)
    words = (flat << torch.arange(32, device=flat.device)).sum(1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # the same 32 bits, signed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("which", ["x", "bias", "none"])
def test_bits_on_misaligned_views_and_nan(ext, device, dtype, which):
    """forward_bits from a view one element past 16 bytes (one value per thread on a GPU), with NaNs,
    which relu lets through (so their bit is set, as in the bool mask)."""
    x, b, g = inputs((37, 24), dtype, device)
    x[3, 5] = float("nan")
    base = torch.empty(x.numel() + 1, device=device, dtype=dtype)
    xs = base[1:].view(x.shape) if which == "x" else x
    xs.copy_(x)
    bbase = torch.empty(25, device=device, dtype=dtype)
    bs = bbase[1:] if which == "bias" else b
    bs.copy_(b)
    y, mask = ext.forward_mask(x, b, SCALE)
    yb, bits = ext.forward_bits(xs, bs, SCALE)
    assert torch.equal(bits, pack_bits(mask)) and bool(mask[3, 5])
    assert torch.equal(yb.nan_to_num(7.0), y.nan_to_num(7.0))
    want = ext.backward_from_mask(g, mask, SCALE)
    got = ext.backward_from_mask(g, bits, SCALE)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_backward_matches_autograd_from_input_mask_and_output(ext, device, dtype, shape):
    x, b, g = inputs(shape, dtype, device)
    want_x, want_b = autograd_reference(x, b, g)
    y, mask = ext.forward_mask(x, b, SCALE)
    with check.poisoned():
        results = {
            "input": ext.backward(g, x, b, SCALE, True),
            "mask": ext.backward_from_mask(g, mask, SCALE, True),
            "bits": ext.backward_from_mask(g, ext.forward_bits(x, b, SCALE)[1], SCALE, True),
            "output": ext.backward_from_mask(g, y, SCALE, True),
        }
    for saved, (gx, gb) in results.items():
        check.assert_close(gx, want_x, name=f"grad_x (from {saved})")
        check.assert_close(gb, want_b, name=f"grad_bias (from {saved})", **bias_tol(x))


def test_bias_grad_is_optional(ext, device):
    x, b, g = inputs((33, 40), torch.float32, device)
    gx, gb = ext.backward(g, x, b, SCALE, False)
    assert gb is None
    check.assert_close(gx, autograd_reference(x, b, g)[0])
    assert ext.backward_from_mask(g, ext.forward(x, b, SCALE), SCALE, False)[1] is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (5, 1), (3,), (4, 3), (1151,), (3, 1151), (4096,), (2, 4096), (6, 20)])
def test_forward_v3_awkward_shapes_and_in_place(ext, device, dtype, shape):
    """v3 over C = 1, 3, 1151 (C % Pack != 0: the v2 fallback), 4096 and 20 (Packs for float32 only)."""
    x, b, _ = inputs(shape, dtype, device)
    want = fbr.expected(x, b, SCALE)
    with check.poisoned():
        y = ext.forward(x, b, SCALE, 3)
    check.assert_close(y, want, name="y (v3)")
    assert torch.equal(y, ext.forward(x, b, SCALE, 2))  # the same math, the same bits
    t = x.clone()
    assert ext.forward_(t, b, SCALE) is t
    assert torch.equal(t, y)


def test_default_function_is_the_cpp_one_and_saves_bits(ext, device):
    x = torch.randn(6, 40, device=device, requires_grad=True)
    b = torch.randn(40, device=device, requires_grad=True)
    y = fbr.fused_bias_relu(x, b, SCALE)
    assert y.grad_fn.name().endswith("CppNode<FusedBiasReluFunction>")
    assert fbr.fused_bias_relu_python(x, b, SCALE).grad_fn.name() == "FusedBiasReluBackward"
    saved = fbr.saved_tensors(lambda x, b: ext.fused_bias_relu(x, b, SCALE), x, b)
    assert [(r[0], r[1], r[3]) for r in saved] == [((8,), torch.int32, "new")]  # 240 bits in 8 words
    python = fbr.saved_tensors(lambda x, b: fbr.fused_bias_relu_python(x, b, SCALE), x, b)
    assert [(r[0], r[1], r[3]) for r in python] == [((8,), torch.int32, "new")]


def test_gradcheck_cpp_function_and_in_place(ext, device):
    x = torch.randn(5, 3, 11, device=device, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, device=device, dtype=torch.float64, requires_grad=True)
    assert check.gradcheck(lambda x, b: ext.fused_bias_relu(x, b, SCALE), x, b)
    assert check.gradcheck(lambda x, b: fbr.fused_bias_relu_(x * 1.0, b, SCALE), x, b)


@pytest.mark.parametrize(
    "make",
    [lambda: fbr.fused_bias_relu, lambda: fbr.fused_bias_relu_python, lambda: None],
    ids=["default", "python", "cpp"],
)
def test_autograd_only_where_needed(ext, device, make):
    op = make() or (lambda x, b, s: ext.fused_bias_relu(x, b, s))
    x, b, g = inputs((8, 24), torch.float32, device)
    xg = x.clone().requires_grad_()
    op(xg, b, SCALE).backward(g)  # bias needs no grad
    check.assert_close(xg.grad, autograd_reference(x, b, g)[0])
    bg = b.clone().requires_grad_()
    op(x, bg, SCALE).backward(g)  # x needs no grad
    check.assert_close(bg.grad, autograd_reference(x, b, g)[1], **bias_tol(x))


def test_autograd_through_a_loss_with_broadcast_grad(device):
    x = torch.randn(4, 33, device=device, requires_grad=True)
    b = torch.randn(33, device=device, requires_grad=True)
    fbr.fused_bias_relu(x, b, SCALE).sum().backward()  # grad_y is an expanded (stride 0) tensor
    xr, br = x.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    fbr.reference(xr, br, SCALE).sum().backward()
    check.assert_close(x.grad, xr.grad)
    check.assert_close(b.grad, br.grad)


def test_nan_goes_through_like_torch_relu(ext, device):
    x = torch.tensor([[float("nan"), -1.0, 1.0]], device=device)
    b = torch.zeros(3, device=device)
    y = ext.forward(x, b)
    assert torch.equal(y.isnan(), torch.relu(x).isnan())
    xr = x.clone().requires_grad_()
    torch.relu(xr * 1.0 + b).backward(torch.ones_like(x))
    for gx, _ in (ext.backward(torch.ones_like(x), x, b), ext.backward_from_mask(torch.ones_like(x), y)):
        assert torch.equal(gx, xr.grad)


@pytest.mark.parametrize("path", ["op", "python_function"])
def test_in_place_matches_and_bumps_the_version(ext, device, path):
    """The registered op (its C++ Autograd kernel marks x dirty: the version goes up once), and lesson 02's
    Python FusedBiasReluInplace with ext (ext.forward_ bumps it, then mark_dirty: twice)."""
    x, b, g = inputs((31, 20), torch.float32, device)
    h = x.clone().requires_grad_()
    a = h * 1.0  # a non-leaf to modify in place
    version = a._version
    out = fbr.fused_bias_relu_(a, b, SCALE, ext=ext if path == "python_function" else None)
    assert out is a and a._version == version + (1 if path == "op" else 2)
    assert a.grad_fn.name().endswith(
        "CppNode<FusedBiasReluInplaceFunction>" if path == "op" else "FusedBiasReluInplaceBackward"
    )
    check.assert_close(a.detach(), fbr.expected(x, b, SCALE))
    out.backward(g)
    check.assert_close(h.grad, autograd_reference(x, b, g)[0])


def test_in_place_refuses_what_autograd_refuses(ext, device):
    b = torch.randn(5, device=device)
    leaf = torch.randn(3, 5, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        fbr.fused_bias_relu_(leaf, b)
    with pytest.raises(RuntimeError, match="mark_dirty|marks x dirty"):
        ext.forward_(leaf * 1.0, b, 1.0)  # the raw op: autograd could not see the change
    a = leaf.exp()  # exp saves its output for backward ...
    fbr.fused_bias_relu_(a, b)  # ... which this overwrites
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        a.sum().backward()


def test_in_place_on_non_contiguous_x(ext, device):
    x, b, _ = inputs((16, 9), torch.float32, device)
    t = x.t().contiguous().t()  # same values, column-major
    assert not t.is_contiguous()
    out = ext.forward_(t, b, SCALE)
    assert out.data_ptr() == t.data_ptr()
    check.assert_close(t, fbr.expected(x, b, SCALE))


def test_non_contiguous_input_gives_correct_result(ext, device):
    x = torch.randn(33, 64, device=device).t()  # [64, 33], C = 33 with stride 64 apart
    b = torch.randn(33, device=device)
    assert not x.is_contiguous()
    check.assert_close(ext.forward(x, b, SCALE), fbr.expected(x, b, SCALE))
    g = torch.randn(33, 64, device=device).t()
    gx, gb = ext.backward(g, x, b, SCALE)
    want_x, want_b = autograd_reference(x, b, g)
    check.assert_close(gx, want_x)
    check.assert_close(gb, want_b, **bias_tol(x))


@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (0,), (2, 0, 3)])
def test_empty_input_gives_empty_result(ext, device, shape):
    x = torch.empty(shape, device=device)
    b = torch.empty(shape[-1], device=device)
    assert ext.forward(x, b).shape == shape
    assert ext.forward_mask(x, b)[1].shape == shape
    gx, gb = ext.backward(x, x, b)
    assert gx.shape == shape and torch.equal(gb, torch.zeros(shape[-1], device=device))
    assert ext.backward_from_mask(x, x)[0].shape == shape


# Which calls refuse each bad input: "all" (lesson 02's functions and the registered ops, whose kernels run
# the same checks: the out-of-place op and the in-place one), "ext" (lesson 02's functions: torch.ops refuses
# None while parsing its arguments, before any kernel), "raw" (ext.forward and forward_mask only: the
# differentiable op promotes mixed floating dtypes as native does, tested below).
@pytest.mark.parametrize(
    "make, exc, words, which",
    [
        (
            lambda d: (torch.ones(2, 3, device=d), torch.ones(4, device=d)),
            ValueError,
            "bias must have shape [C] = [3] to match x's last dimension, got [4]",
            "all",
        ),
        (
            lambda d: (torch.ones(2, 3, device=d), torch.ones(1, 3, device=d)),
            ValueError,
            "bias must have shape [C] = [3] to match x's last dimension, got [1, 3]",
            "all",
        ),
        (
            lambda d: (torch.ones(2, 3, device=d), torch.ones(3, device="meta")),
            RuntimeError,
            "bias must be on the same device as x",
            "all",
        ),
        (
            lambda d: (torch.ones(2, 3, device=d), torch.ones(3, device=d, dtype=torch.float64)),
            TypeError,
            "bias must have the dtype of x (Float), got Double",
            "raw",
        ),
        (
            lambda d: (torch.ones(2, 3, device=d, dtype=torch.int32), torch.ones(3, device=d, dtype=torch.int32)),
            TypeError,
            "x must be float32",
            "all",
        ),
        (
            lambda d: (torch.ones(2, 3, device=d), torch.ones(3, device=d, dtype=torch.int32)),
            TypeError,
            "bias must have the dtype of x (Float), got Int",
            "all",
        ),
        (lambda d: (torch.tensor(1.0, device=d), torch.ones(1, device=d)), ValueError, "at least one dimension", "all"),
        (lambda d: (None, torch.ones(3, device=d)), (ValueError, TypeError), "x", "ext"),
        (lambda d: (torch.ones(2, 3, device=d), None), (ValueError, TypeError), "bias", "ext"),
    ],
)
def test_bad_input_names_the_argument(ext, ops, device, make, exc, words, which):
    x, b = make(device)
    fns = [ext.forward, ext.forward_mask]
    if which != "raw":
        fns.append(ext.fused_bias_relu)
    if which == "all":
        fns += [lambda x, b: ops.fused_bias_relu(x, b, 1.0), lambda x, b: ops.fused_bias_relu_(x.clone(), b, 1.0)]
    for fn in fns:
        with pytest.raises(exc, match=re.escape(words)):
            fn(x, b)


def test_bad_backward_input_names_the_argument(ext, device):
    x, b = torch.ones(2, 3, device=device), torch.ones(3, device=device)
    with pytest.raises(ValueError, match="grad_y must have shape"):
        ext.backward(torch.ones(3, 2, device=device), x, b)
    with pytest.raises(TypeError, match="grad_y must have the dtype of x"):
        ext.backward(torch.ones(2, 3, device=device, dtype=torch.float64), x, b)
    with pytest.raises(TypeError, match="mask must be bool"):
        ext.backward_from_mask(x, torch.ones(2, 3, device=device, dtype=torch.int8))
    with pytest.raises(ValueError, match="mask must have shape"):
        ext.backward_from_mask(x, torch.ones(3, device=device, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask \(int32 bits\) must have shape \[1\]"):
        ext.backward_from_mask(x, torch.ones(2, device=device, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="mask must be on the same device as grad_y"):
        ext.backward_from_mask(x, torch.ones(2, 3, device="meta", dtype=torch.bool))
    with pytest.raises(ValueError, match="version must be between 1 and 3, got 4"):
        ext.forward(x, b, 1.0, 4)
    with pytest.raises(ValueError, match="version must be between 1 and 4, got 5"):
        ext.backward(x, x, b, 1.0, True, 5)
    for version in (3, 4):
        with pytest.raises(ValueError, match=f"backward version {version} .* reads relu' from y"):
            ext.backward(x, x, b, 1.0, True, version)
    with pytest.raises(ValueError, match="save must be one of"):
        fbr.fused_bias_relu(x, b, save="nothing")


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 5), (300, 20), (4097, 33), (2, 3, 257), (300001, 2)])
def test_backward_v3_and_v4_bias_grad_pass_matches_v2(ext, device, dtype, shape, version):
    """Backward v3 (one thread per column) and v4 (lesson 02's bias_grad exercise, here its solution: per-block
    partial sums, then their sum; 300001 rows make tiles longer than 256): grad_x as v1/v2 (the same kernel, the
    same bits), grad_bias the float64 sum rounded once."""
    x, b, g = inputs(shape, dtype, device)
    y = ext.forward(x, b, SCALE)
    with check.poisoned():
        gx, gb = ext.backward_from_mask(g, y, SCALE, True, version)
    assert torch.equal(gx, ext.backward_from_mask(g, y, SCALE, False, 2)[0])
    want = (g.double() * (y.double() > 0)).reshape(-1, shape[-1]).sum(0).to(dtype)
    check.assert_close(gb, want, **({} if dtype != torch.float32 else bias_tol(x)))
    assert ext.backward_from_mask(g, y, SCALE, False, version)[1] is None


@pytest.mark.parametrize("version", [3, 4])
def test_bias_grad_into_writes_its_view_only_and_names_bad_arguments(ext, device, version):
    x, b, g = inputs((513, 37), torch.float32, device)
    y = ext.forward(x, b, SCALE)
    buf = torch.full((37 + 8,), -4096.0, device=device)
    out = ext.bias_grad_into(g, y, buf[4:41], version)
    assert out.data_ptr() == buf[4:41].data_ptr()
    assert torch.equal(buf[:4], torch.full((4,), -4096.0, device=device)) and bool((buf[41:] == -4096.0).all())
    check.assert_close(out, ext.backward_from_mask(g, y, SCALE, True, 2)[1], **bias_tol(x))
    empty = torch.full((37,), 5.0, device=device)
    assert bool((ext.bias_grad_into(g[:0], y[:0], empty, version) == 0).all())  # a sum over no rows
    with pytest.raises(ValueError, match=r"grad_bias must have shape \[37\], got \[36\]"):
        ext.bias_grad_into(g, y, buf[:36], version)
    with pytest.raises(ValueError, match="grad_bias must be contiguous"):
        ext.bias_grad_into(g, y, torch.empty(74, device=device)[::2], version)
    with pytest.raises(TypeError, match="grad_bias must have the dtype of grad_y"):
        ext.bias_grad_into(g, y, torch.empty(37, device=device, dtype=torch.float64), version)
    with pytest.raises(ValueError, match="y must have shape"):
        ext.bias_grad_into(g, y[:5], buf[4:41], version)
    with pytest.raises(ValueError, match="bias_grad_into runs backward version 3 or 4 .* got 2"):
        ext.bias_grad_into(g, y, buf[4:41], 2)


def test_bias_grad_does_not_depend_on_the_number_of_cpu_threads(ext):
    x, b, g = inputs((4000, 33), torch.float32, "cpu")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ext.backward(g, x, b, SCALE)[1]
        torch.set_num_threads(max(2, threads))
        many = ext.backward(g, x, b, SCALE)[1]
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)


def test_layer_and_fused_model_match_native(device):
    torch.manual_seed(0)
    native = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3)).to(device)
    fused = fbr.fuse(native)
    assert [type(m).__name__ for m in fused] == ["LinearReLU", "LinearReLU", "Linear"]
    x = torch.randn(20, 12, device=device)
    check.assert_close(fused(x), native(x), rtol=1e-5, atol=1e-6)
    native(x).square().sum().backward()
    fused(x).square().sum().backward()
    for (name, p), q in zip(native.named_parameters(), fused.parameters()):
        check.assert_close(q.grad, p.grad, name=f"grad of {name}", rtol=1e-4, atol=1e-5)


def test_short_training_run_matches_native():
    x, y = fbr.synthetic_task(n=512, d_in=16)
    torch.manual_seed(0)
    native = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 10))
    fused = fbr.fuse(native)
    a, _ = fbr.train(native, x, y, steps=30, batch=64)
    b, _ = fbr.train(fused, x, y, steps=30, batch=64)
    assert a[-1] < a[0]
    torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-4, atol=1e-5)


def test_memory_helpers_count_what_backward_keeps():
    x, b = torch.randn(64, 32, requires_grad=True), torch.randn(32, requires_grad=True)
    saved = {s: fbr.saved_tensors(lambda x, b: fbr.fused_bias_relu(x, b, save=s), x, b) for s in fbr.SAVES}
    assert [r[3] for r in saved["input"]] == ["arg 0", "arg 1"]
    assert saved["mask"] == [((64, 32), torch.bool, 64 * 32, "new")]
    assert [r[3] for r in saved["output"]] == ["the output"]
    ws = [torch.randn(32, 32, requires_grad=True) for _ in range(4)]
    bs = [torch.randn(32, requires_grad=True) for _ in range(3)]

    def kept(op):
        return fbr.graph_bytes(fbr.stack, x, ws, bs, op, exclude=[x, *ws, *bs])

    act = 64 * 32 * 4
    native = kept(fbr.reference)
    assert native == 3 * act  # each layer's output: the next product's input (and relu's output)
    assert kept(lambda h, b: fbr.fused_bias_relu(h, b, save="output")) == native
    assert kept(lambda h, b: fbr.fused_bias_relu(h, b, save="mask")) == native + 3 * act // 4
    assert kept(lambda h, b: fbr.fused_bias_relu(h, b, save="input")) == native + 3 * act


# ------------------------------------------------------------------------------------------------
# The registered ops (lesson 04): torch.ops.course.fused_bias_relu, _bits, _backward_bits, fused_bias_relu_
# ------------------------------------------------------------------------------------------------

# x's shape, and its layout: "nc" every other element of a buffer twice as wide (bias too), "t" a
# transposed (column-major) x. Empty, 1-d, 3-d, C = 1 and sizes that are not multiples of 32 (the bits).
OP_SHAPES = [((5,), ""), ((17, 3), ""), ((2, 3, 5), ""), ((0, 5), ""), ((4, 0), ""), ((0,), ""), ((33, 1), "")]
OP_SHAPES += [((9, 20), "nc"), ((2, 7, 6), "nc"), ((20, 9), "t")]
OP_IDS = ["x".join(map(str, shape)) + (f"-{layout}" if layout else "") for shape, layout in OP_SHAPES]


def op_inputs(shape, layout, dtype, device, seed=0):
    """x, bias and grad_y of `shape` in `layout` (see OP_SHAPES)."""
    x, b, g = inputs(shape, dtype, device, seed)

    def spread(t):  # the same values, every other element of a buffer twice as wide
        buf = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], device=device, dtype=dtype)
        buf[..., ::2] = t
        return buf[..., ::2]

    if layout == "nc":
        x, b, g = spread(x), spread(b), spread(g)
    elif layout == "t":
        x, g = x.t().contiguous().t(), g.t().contiguous().t()
    return x, b, g


def opcheck(op, args):
    """All of torch.library.opcheck's tests (schema, autograd registration, fake kernel against the real
    one, and the op traced and compiled by AOTAutograd with dynamic shapes); fails naming the failing ones."""
    torch.library.opcheck(op, args)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, layout", OP_SHAPES, ids=OP_IDS)
def test_opcheck_every_op(ops, device, dtype, shape, layout):
    x, b, g = op_inputs(shape, layout, dtype, device)
    for wants in ("x and bias", "bias", "none"):  # leaves of the same layout (detach keeps the strides)
        xg, bg = x.detach().requires_grad_(wants == "x and bias"), b.detach().requires_grad_(wants != "none")
        opcheck(ops.fused_bias_relu.default, (xg, bg, SCALE))
    opcheck(ops.fused_bias_relu_bits.default, (x, b, SCALE))
    y, bits = ops.fused_bias_relu_bits(x, b, SCALE)
    for saved in (bits, y):  # what the out-of-place op saves, and what the in-place one does
        for need_bias in (True, False):
            opcheck(ops.fused_bias_relu_backward_bits.default, (g, saved, -0.5, need_bias))
    for bias_grad in (False, True):  # a fresh x of the same layout each time: the op writes into it
        opcheck(
            ops.fused_bias_relu_.default,
            (op_inputs(shape, layout, dtype, device)[0], b.detach().requires_grad_(bias_grad), SCALE),
        )


def test_the_ops_match_lesson_02s_functions(ops, ext, device):
    """The registered kernels are lesson 02's: the same bits for y, the bit mask and the gradients."""
    x, b, g = inputs((37, 24), torch.bfloat16, device)
    y, bits = ops.fused_bias_relu_bits(x, b, SCALE)
    want_y, want_bits = ext.forward_bits(x, b, SCALE)
    assert torch.equal(y, want_y) and torch.equal(bits, want_bits)
    assert torch.equal(ops.fused_bias_relu(x, b, SCALE), want_y)
    for saved in (bits, y):
        gx, gb = ops.fused_bias_relu_backward_bits(g, saved, SCALE, True)
        want_x, want_b = ext.backward_from_mask(g, saved, SCALE, True)
        assert torch.equal(gx, want_x) and torch.equal(gb, want_b)
    gx, gb = ops.fused_bias_relu_backward_bits(g, bits, SCALE, False)
    assert torch.equal(gx, want_x) and gb.shape == (0,)  # no grad_bias wanted: an empty tensor
    t = x.clone()
    assert ops.fused_bias_relu_(t, b, SCALE) is None and torch.equal(t, want_y)


def test_the_op_records_autograd_only_when_it_must(ops, device):
    """With nothing requiring grad (or under no_grad) the forward alone runs: no graph node and no bit mask
    saved; otherwise the C++ Function saving the bits."""
    x, b, _ = inputs((6, 40), torch.float32, device)
    assert ops.fused_bias_relu(x, b, SCALE).grad_fn is None
    xg = x.clone().requires_grad_()
    with torch.no_grad():
        assert ops.fused_bias_relu(xg, b, SCALE).grad_fn is None
    assert fbr.saved_tensors(lambda x, b: ops.fused_bias_relu(x, b, SCALE), x, b) == []
    y = ops.fused_bias_relu(xg, b, SCALE)
    assert y.grad_fn.name().endswith("CppNode<FusedBiasReluFunction>")
    saved = fbr.saved_tensors(lambda x, b: ops.fused_bias_relu(x, b, SCALE), xg, b)
    assert [(r[0], r[1]) for r in saved] == [((8,), torch.int32)]


def test_in_place_op_is_differentiable_and_bumps_the_version_once(ops, device):
    """torch.ops.course.fused_bias_relu_ has its own Autograd kernel (a C++ Function that marks x dirty):
    gradients through it without a Python Function; its version goes up once, by the op's ADInplaceOrView
    kernel without autograd, by mark_dirty with it."""
    x, b, g = inputs((31, 20), torch.float32, device)
    h, bg = x.clone().requires_grad_(), b.clone().requires_grad_()
    a = h * 1.0
    version = a._version
    assert ops.fused_bias_relu_(a, bg, SCALE) is None
    assert a._version == version + 1 and a.grad_fn.name().endswith("CppNode<FusedBiasReluInplaceFunction>")
    check.assert_close(a.detach(), fbr.expected(x, b, SCALE))
    a.backward(g)
    want_x, want_b = autograd_reference(x, b, g)
    check.assert_close(h.grad, want_x)
    check.assert_close(bg.grad, want_b, **bias_tol(x))
    t = x.clone()
    version = t._version
    ops.fused_bias_relu_(t, b, SCALE)  # nothing requires grad
    assert t._version == version + 1
    leaf = x.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        ops.fused_bias_relu_(leaf, b, SCALE)
    assert torch.equal(leaf.detach(), x)  # refused before the write


def test_register_autograd_refuses_the_mutating_op(ops):
    """Why the in-place op's autograd is a C++ Autograd kernel: torch.library.register_autograd takes only
    functional ops (torch 2.11)."""
    lib = torch.library.Library("course", "FRAGMENT")  # destroyed after: were it accepted, it would go
    try:
        with pytest.raises(RuntimeError, match="Cannot register autograd formula for non-functional operator"):
            torch.library.register_autograd("course::fused_bias_relu_", lambda ctx, g: (g, None, None), lib=lib)
    finally:
        lib._destroy()


# torch.compile


def compiled_vs_eager(fn, args, grad_seed=1):
    """fn compiled with fullgraph=True against eager: output and the gradients of the args requiring grad."""

    def run(f):
        y = f(*args)
        wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        g = torch.randn(y.shape, generator=torch.Generator().manual_seed(grad_seed)).to(y.device, y.dtype)
        return y, torch.autograd.grad(y, wrt, g)

    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    assert explained.graph_break_count == 0, f"graph breaks: {explained.break_reasons}"
    want_y, want_grads = run(fn)
    got_y, got_grads = run(torch.compile(fn, fullgraph=True))
    assert got_y.dtype == want_y.dtype
    check.assert_close(got_y, want_y, name="compiled output")
    for i, (got, want) in enumerate(zip(got_grads, want_grads)):
        check.assert_close(got, want, name=f"compiled gradient {i}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, layout", [((6, 7), ""), ((2, 3, 40), ""), ((9, 20), "nc")], ids=str)
def test_compile_fullgraph_forward_and_backward_equal_eager(ops, device, dtype, shape, layout):
    x, b, _ = op_inputs(shape, layout, dtype, device)
    x.requires_grad_(), b.requires_grad_()
    compiled_vs_eager(lambda x, b: fbr.fused_bias_relu(x * 1.5, b, SCALE) * 2, (x, b))
    compiled_vs_eager(lambda x, b: torch.ops.course.fused_bias_relu(x, b, -0.5).sum(-1), (x, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_compile_fullgraph_in_place_op(ops, device, dtype):
    """The mutating op in a compiled graph: on an intermediate (forward and backward), and on a graph input
    that does not require grad (the mutation written back to it)."""
    x, b, _ = inputs((6, 40), dtype, device)
    x.requires_grad_(), b.requires_grad_()

    def on_intermediate(x, b):
        h = x * 2.0
        fbr.fused_bias_relu_(h, b, SCALE)
        return h + 1

    compiled_vs_eager(on_intermediate, (x, b))

    def on_input(t, b):
        fbr.fused_bias_relu_(t, b, SCALE)
        return t.sum()

    t, want = x.detach().clone(), x.detach().clone()
    torch._dynamo.reset()
    torch.compile(on_input, fullgraph=True)(t, b.detach())
    on_input(want, b.detach())
    assert torch.equal(t, want)


# Mixed dtypes and autocast, against native torch.relu(x * scale + bias)


def native(x, b, scale=SCALE):
    return torch.relu(x * scale + b)


MIXED = [
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float32),
    (torch.float32, torch.bfloat16),
    (torch.float32, torch.float64),
    (torch.float16, torch.bfloat16),
]


@pytest.mark.parametrize("x_dtype, b_dtype", MIXED, ids=str)
@pytest.mark.parametrize("save", ["bits", "output", "input", "mask"])
def test_mixed_dtypes_give_natives_dtype(ops, device, x_dtype, b_dtype, save):
    """x and bias of different floating dtypes: the dtype native type promotion gives, values within that
    dtype's rounding of the exact result, and each gradient in its own argument's dtype."""
    x, b, _ = inputs((33, 24), x_dtype, device)
    b = b.to(b_dtype)
    want_dtype = native(x, b).dtype
    xg, bg = x.clone().requires_grad_(), b.clone().requires_grad_()
    y = fbr.fused_bias_relu(xg, bg, SCALE, save=save)
    assert y.dtype == want_dtype
    check.assert_close(y, native(x.double(), b.double()).to(want_dtype))
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(device, y.dtype)
    gx, gb = torch.autograd.grad(y, (xg, bg), g)
    xd, bd = x.double().requires_grad_(), b.double().requires_grad_()
    want_x, want_b = torch.autograd.grad(native(xd, bd), (xd, bd), g.double())
    assert gx.dtype == x_dtype and gb.dtype == b_dtype
    check.assert_close(gx, want_x.to(x_dtype))
    check.assert_close(gb, want_b.to(b_dtype), **({"rtol": 1e-4, "atol": 1e-4} if b_dtype == torch.float32 else {}))
    if save == "bits":
        with torch.no_grad():  # the kernel itself (no autograd), and its fake: the same dtype
            assert ops.fused_bias_relu(x, b, SCALE).dtype == want_dtype
        with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
            fake = ops.fused_bias_relu(mode.from_tensor(x), mode.from_tensor(b), SCALE)
        assert fake.dtype == want_dtype


@pytest.mark.parametrize("x_dtype, b_dtype", MIXED, ids=str)
def test_in_place_with_another_bias_dtype_keeps_xs_dtype(ops, device, x_dtype, b_dtype):
    """As native x.mul_(s).add_(b).relu_(): x keeps its dtype (y rounded once into it)."""
    x, b, g = inputs((33, 24), x_dtype, device)
    b = b.to(b_dtype)
    t = x.clone()
    fbr.fused_bias_relu_(t, b, SCALE)
    assert t.dtype == x.clone().mul_(SCALE).add_(b).relu_().dtype == x_dtype
    check.assert_close(t, native(x.double(), b.to(x_dtype).double()).to(x_dtype))
    h, bg = x.clone().requires_grad_(), b.clone().requires_grad_()
    a = h * 1.0
    fbr.fused_bias_relu_(a, bg, SCALE)
    gx, gb = torch.autograd.grad(a, (h, bg), g)
    assert gx.dtype == x_dtype and gb.dtype == b_dtype


AUTOCAST = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bfloat16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16", marks=needs_gpu),
    pytest.param("cuda", torch.float16, id="cuda-float16", marks=needs_gpu),
]


@pytest.mark.parametrize("amp_device, amp_dtype", AUTOCAST)
def test_autocast_behaves_like_native(ops, amp_device, amp_dtype):
    """Native mul, add and relu have no autocast rule: they run in their inputs' dtypes. So does ours, in the
    three cases a model meets: float32 activations, activations from a matmul under autocast (amp_dtype)
    with a float32 bias (a parameter: float32, promoted as native does), and everything in amp_dtype. The
    output's dtype and values, and the gradients' dtypes, against native under the same autocast."""
    torch.manual_seed(0)
    x = torch.randn(16, 48, device=amp_device)
    w = torch.randn(40, 48, device=amp_device) / 7
    b = torch.randn(40, device=amp_device)
    cases = {
        "float32 activations": lambda x, w: torch.nn.functional.linear(x, w).float(),
        "matmul output": lambda x, w: torch.nn.functional.linear(x, w),
        "all low": lambda x, w: torch.nn.functional.linear(x, w).to(amp_dtype),
    }
    for case, make in cases.items():
        results = {}
        for name, op in (("native", native), ("ours", fbr.fused_bias_relu), ("op", ops.fused_bias_relu)):
            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            bg = (b.to(amp_dtype) if case == "all low" else b).clone().requires_grad_()
            with torch.autocast(amp_device, dtype=amp_dtype):
                h = make(xg, wg)
                y = op(h, bg, SCALE)
                grads = torch.autograd.grad(y.float().square().sum(), (h, bg))
            results[name] = (h, y, grads)
        h, want, want_grads = results["native"]
        for name in ("ours", "op"):
            _, y, grads = results[name]
            assert y.dtype == want.dtype, f"{case}, {name}: {y.dtype}, native gives {want.dtype}"
            exact = native(h.detach().double(), (b.to(amp_dtype) if case == "all low" else b).double())
            check.assert_close(y, exact.to(y.dtype), name=f"{case}, {name}")
            assert [t.dtype for t in grads] == [t.dtype for t in want_grads], case


# The second derivative


@pytest.mark.parametrize(
    "name, fn",
    [
        ("fused_bias_relu", lambda x, b: fbr.fused_bias_relu(x, b, SCALE)),
        ("fused_bias_relu", lambda x, b: torch.ops.course.fused_bias_relu(x, b, SCALE)),
        ("fused_bias_relu", lambda x, b: fbr.fused_bias_relu(x, b, SCALE, save="output")),
        ("fused_bias_relu_", lambda x, b: fbr.fused_bias_relu_(x * 1.0, b, SCALE)),
    ],
    ids=["public", "torch.ops", "saves y", "in place"],
)
def test_a_second_derivative_is_an_error_naming_the_op(ops, device, name, fn):
    """Our backward kernel is not differentiable: gradgradcheck raises naming the op, and so does a second
    derivative with respect to x or bias alone (create_graph=True, then grad of the gradient), where no
    saved tensor leads back to them. An ordinary create_graph=True backward still works."""
    x = torch.randn(5, 3, 11, device=device, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, device=device, dtype=torch.float64, requires_grad=True)
    message = re.escape(f"course::{name} has no double backward")
    with pytest.raises(RuntimeError, match=message):
        torch.autograd.gradgradcheck(fn, (x, b))
    for wrt in (x, b):
        (grad,) = torch.autograd.grad(fn(x, b).sum(), wrt, create_graph=True)
        with pytest.raises(RuntimeError, match=message):
            torch.autograd.grad(grad.square().sum(), wrt)
    gx, gb = torch.autograd.grad(fn(x, b).sum(), (x, b), create_graph=True)
    want_x, want_b = autograd_reference(x.detach(), b.detach(), torch.ones_like(x))
    check.assert_close(gx.detach(), want_x)
    check.assert_close(gb.detach(), want_b)


# ------------------------------------------------------------------------------------------------
# GPU only
# ------------------------------------------------------------------------------------------------


@needs_gpu
def test_cpu_tensor_to_cuda_op_is_a_clear_error(ext):
    with pytest.raises(RuntimeError, match=r"bias must be on the same device as x \(cuda:0\), got cpu"):
        ext.forward(torch.ones(2, 3, device="cuda"), torch.ones(3))


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", ["x", "bias", "grad_y", "mask"])
def test_misaligned_pointers_take_the_scalar_path(ext, dtype, which):
    shape = (37, 64)  # a multiple of every Pack, so only the pointers can be misaligned
    x, b, g = inputs(shape, dtype, "cuda")

    def shifted(t):  # the same values at an address 1 element past a 16-byte boundary
        base = torch.empty(t.numel() + 1, device="cuda", dtype=t.dtype)
        out = base[1:].view(t.shape)
        out.copy_(t)
        return out

    x2, b2, g2 = (shifted(x) if which == "x" else x), (shifted(b) if which == "bias" else b), g
    if which == "grad_y":
        g2 = shifted(g)
    y, mask = ext.forward_mask(x2, b2, SCALE)
    check.assert_close(y, fbr.expected(x, b, SCALE))
    mask2 = shifted(mask) if which == "mask" else mask
    want_x, want_b = autograd_reference(x, b, g)
    for gx, gb in (ext.backward(g2, x2, b2, SCALE), ext.backward_from_mask(g2, mask2, SCALE)):
        check.assert_close(gx, want_x)
        check.assert_close(gb, want_b, **bias_tol(x))


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 3, 64, 1151, 4096])
@pytest.mark.parametrize("which", ["x", "bias", "none"])
def test_forward_v3_misaligned_views_fall_back(ext, dtype, cols, which):
    """x[1:] of a flat buffer (one element past 16 bytes), or a shifted bias: v3 must fall back to v2."""
    x, b, _ = inputs((9, cols), dtype, "cuda")
    base = torch.empty(x.numel() + 1, device="cuda", dtype=dtype)
    xs = base[1:].view(x.shape) if which == "x" else x
    xs.copy_(x)
    bbase = torch.empty(cols + 1, device="cuda", dtype=dtype)
    bs = bbase[1:] if which == "bias" else b
    bs.copy_(b)
    want = fbr.expected(x, b, SCALE)
    with check.poisoned():
        y = ext.forward(xs, bs, SCALE, 3)
        ym, mask = ext.forward_mask(xs, bs, SCALE)
    check.assert_close(y, want, name="y (v3)")
    check.assert_close(ym, want, name="y (forward_mask)")
    assert torch.equal(mask, (x.double() * SCALE + b.double()) > 0)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(4096, 4096), (3, 8192), (1000, 1024)])
def test_forward_v3_matches_v2_and_backward_on_large_inputs(ext, dtype, shape):
    x, b, g = inputs(shape, dtype, "cuda")
    y = ext.forward(x, b, SCALE, 3)
    assert torch.equal(y, ext.forward(x, b, SCALE, 2))
    check.assert_close(y, fbr.expected(x, b, SCALE))
    want_x, want_b = autograd_reference(x, b, g)
    for gx, gb in (ext.backward(g, x, b, SCALE), ext.backward_from_mask(g, y, SCALE)):
        check.assert_close(gx, want_x)
        check.assert_close(gb, want_b, **({} if dtype != torch.float32 else bias_tol(x)))


@needs_gpu
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("shape", [(4096, 4096), (1 << 20, 3), (7, 1 << 17), (1, 5), (33, 1000), (40000, 24)])
def test_bias_gradient_is_deterministic_and_right_on_large_inputs(ext, shape, version):
    """Backward v1 (two kernels) and v2 (one cooperative kernel): the same grad_x bits, grad_bias right
    and the same bits on every call."""
    x, b, g = (t.cuda() for t in inputs(shape, torch.float32, "cpu"))
    y, mask = ext.forward_mask(x, b, SCALE)
    want = (g.double() * (y > 0)).sum(0).float()
    want_x = ext.backward_from_mask(g, y, SCALE, False)[0]
    runs = (
        lambda: ext.backward(g, x, b, SCALE, True, version),
        lambda: ext.backward_from_mask(g, y, SCALE, True, version),
        lambda: ext.backward_from_mask(g, mask, SCALE, True, version),
    )
    for run in runs:
        gx, first = run()  # each kernel adds in a fixed order: the same bits every time
        assert torch.equal(gx, want_x)
        for _ in range(3):
            assert torch.equal(run()[1], first)
        check.assert_close(first, want, **bias_tol(x))


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(4096, 4096), (1 << 20, 3), (7, 1 << 17), (1, 5), (40000, 24)])
def test_backward_v3_one_thread_per_column_on_large_inputs(ext, shape, dtype):
    """Backward v3 (the bias_grad exercise's solution) on the GPU: grad_x the same bits as v2's, grad_bias
    the float64 sum within the dtype's rounding, the same bits on every call (each thread adds in order)."""
    x, b, g = inputs(shape, dtype, "cuda")
    y = ext.forward(x, b, SCALE)
    gx, gb = ext.backward_from_mask(g, y, SCALE, True, 3)
    assert torch.equal(gx, ext.backward_from_mask(g, y, SCALE, False, 2)[0])
    assert torch.equal(ext.backward_from_mask(g, y, SCALE, True, 3)[1], gb)
    want = (g.double() * (y.double() > 0)).sum(0).to(dtype)
    check.assert_close(gb, want, **({} if dtype != torch.float32 else bias_tol(x)))


@needs_gpu
def test_matches_cpu_implementation(ext):
    x, b, g = inputs((1000, 96), torch.float32, "cpu")
    y = ext.forward(x, b, SCALE)
    check.assert_close(ext.forward(x.cuda(), b.cuda(), SCALE).cpu(), y)
    # backward from the same y on both sides: the same relu' decisions, only the summation order differs
    gpu = ext.backward_from_mask(g.cuda(), y.cuda(), SCALE)
    for a, c in zip(gpu, ext.backward_from_mask(g, y, SCALE)):
        check.assert_close(a.cpu(), c, rtol=1e-5, atol=1e-4)


@needs_gpu
def test_mask_saves_memory_on_the_gpu():
    torch.manual_seed(0)
    n, layers = 1024, 4
    x = torch.randn(n, n, device="cuda")
    ws = [(torch.randn(n, n, device="cuda") / n**0.5).requires_grad_() for _ in range(layers + 1)]
    bs = [torch.randn(n, device="cuda", requires_grad=True) for _ in range(layers)]
    with torch.no_grad():  # a process's first matmul allocates cuBLAS's workspace: not what the layers keep
        x @ ws[0]
    kept = {}
    for save in fbr.SAVES:
        kept[save] = fbr.cuda_memory(fbr.stack, x, ws, bs, lambda h, b: fbr.fused_bias_relu(h, b, save=save))[0]
    mb = n * n * 4 / 2**20
    assert kept["output"] < kept["mask"] < kept["input"]
    assert kept["input"] - kept["output"] == pytest.approx(layers * mb, rel=0.05)
    assert kept["mask"] - kept["output"] == pytest.approx(layers * mb / 4, rel=0.05)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("in_place", [False, True], ids=["op", "in-place"])
def test_cuda_graph_capture_of_forward_and_backward(ops, dtype, in_place):
    """Forward and backward captured in one CUDA graph (after a warm-up on a side stream, as
    torch.cuda.graph's docs ask), new values copied into the captured inputs, replayed: the results eager
    gives on those values. Fails if a kernel synchronizes, allocates outside PyTorch's allocator, or bakes
    a value (a pointer, a count) into its launch that changes between calls."""
    x, b, g = inputs((1000, 256), dtype, "cuda")
    x.requires_grad_(), b.requires_grad_()

    def step():
        if in_place:
            y = x * 1.0
            fbr.fused_bias_relu_(y, b, SCALE)
        else:
            y = fbr.fused_bias_relu(x, b, SCALE)
        gx, gb = torch.autograd.grad(y, (x, b), g)
        return y.detach(), gx, gb

    replay, captured = library.captured(step)  # warm-up on a side stream, then the capture
    for seed in (1, 2):
        new_x, new_b, new_g = inputs((1000, 256), dtype, "cuda", seed=seed)
        with torch.no_grad():
            x.copy_(new_x), b.copy_(new_b), g.copy_(new_g)
        replay()
        torch.cuda.synchronize()
        for got, want, what in zip(captured, step(), ("y", "grad_x", "grad_bias")):
            assert torch.equal(got, want), f"replayed {what} differs from eager on the same inputs (seed {seed})"
