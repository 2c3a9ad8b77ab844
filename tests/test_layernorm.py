"""kernels/layernorm.*: every version on the CPU and (on a GPU) CUDA against torch.nn.functional.layer_norm,
gradients, numerics on rows with a large mean, determinism, bad input."""

import re

import pytest
import torch
import torch.nn.functional as F

from helpers import check, loader
from helpers.ops import layernorm as ln
from tests.conftest import load_solutions, needs_gpu

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# N = 1, 3, 33, 1151, 4097: not multiples of 4 or 32 (scalar paths); 1024, 4096, 8192: 16-byte paths;
# 16384 and 32768: the longest rows kept in registers; 65536: the long-row paths.
SHAPES = [(1,), (4, 3), (2, 3, 33), (5, 1024), (3, 1151), (2, 4096), (3, 4097), (2, 8192), (1, 16384)]
SHAPES += [(1, 32768), (2, 65536)]
EPS = 1e-5


@pytest.fixture(scope="module")
def ext():
    return load_solutions("layernorm")


def inputs(shape, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = shape[-1]
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(device=device, dtype=dtype)
    w = torch.randn(n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, generator=g).to(device=device, dtype=dtype)
    return x, w, b


def expected(x, w, b):
    """y from F.layer_norm in float64 (rounded to x's dtype), and the statistics in the math dtype."""
    xd = x.double()
    y = F.layer_norm(xd, (x.shape[-1],), w.double(), b.double(), EPS)
    var, mean = torch.var_mean(xd, -1, unbiased=False)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return y.to(x.dtype), mean.to(acc), torch.rsqrt(var + EPS).to(acc)


def grad_tolerances(dtype, rows):
    if dtype == torch.float32:
        return dict(rtol=1e-4, atol=1e-4), dict(rtol=1e-4, atol=1e-5 * max(rows, 10))
    if dtype == torch.float64:
        return {}, {}
    return {}, {}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("version", [1, 2, 3])
def test_forward_matches_layer_norm(ext, device, dtype, shape, version):
    x, w, b = inputs(shape, dtype, device)
    with check.poisoned():
        y, mean, rstd = ext.forward(x, w, b, EPS, version)
    want_y, want_mean, want_rstd = expected(x, w, b)
    # v1 (one thread per row) adds up to 65536 values one after the other in float32: errors ~3e-5.
    loose = dict(rtol=1e-4, atol=1e-4)
    check.assert_close(y, want_y, name="y", **(loose if dtype == torch.float32 else {}))
    check.assert_close(mean, want_mean, name="mean", **(loose if dtype != torch.float64 else {}))
    check.assert_close(rstd, want_rstd, name="rstd", **(loose if dtype != torch.float64 else {}))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("version", [1, 2])
def test_backward_matches_autograd(ext, device, dtype, shape, version):
    x, w, b = inputs(shape, dtype, device)
    gy = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(device=device, dtype=dtype)
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, b))
    F.layer_norm(xd, (shape[-1],), wd, bd, EPS).backward(gy.double())
    _, mean, rstd = ext.forward(x, w, b, EPS, 3)
    with check.poisoned():
        gx, gw, gb = ext.backward(gy, x, mean, rstd, w, version)
    rows = x.numel() // shape[-1]
    tol_x, tol_w = grad_tolerances(dtype, rows)
    check.assert_close(gx, xd.grad.to(dtype), name="grad_x", **tol_x)
    check.assert_close(gw, wd.grad.to(dtype), name="grad_weight", **tol_w)
    check.assert_close(gb, bd.grad.to(dtype), name="grad_bias", **tol_w)


FORWARD_KERNELS = ["auto", "registers", "pipelined"]  # kernels/layernorm_choices.h, forward v3
BACKWARD_KERNELS = ["auto", "two_kernels", "cooperative", "bulk_copy", "bulk_copy_split_barrier"]  # backward v2


def test_kernel_names_are_the_ones_in_the_header():
    """The names tests, benchmarks and notebook 03b use are the ones layernorm_choices.h maps to its enums."""
    text = (loader.KERNELS / "layernorm_choices.h").read_text()
    for table, names in (("kForwardKernelNames", FORWARD_KERNELS), ("kBackwardKernelNames", BACKWARD_KERNELS)):
        body = text[text.index(table) : text.index("};", text.index(table))]
        assert re.findall(r'"(\w+)"', body) == names, table


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("shape", [(64, 1024), (8, 8192), (3, 24576)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel", FORWARD_KERNELS[1:])
def test_forward_kernels_match_the_default(ext, device, dtype, shape, kernel):
    """Forward v3 takes `kernel` (benchmarks/tuning/layernorm.py and notebook 03b compare their speed): the
    results match the default's, also where a kernel does not apply and the next simpler one runs."""
    x, w, b = inputs(shape, dtype, device)
    want = ext.forward(x, w, b, EPS, 3)
    with check.poisoned():
        got = ext.forward(x, w, b, EPS, 3, kernel)
    for name, a, e in zip(("y", "mean", "rstd"), got, want):
        check.assert_close(a, e, name=name, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("shape", [(64, 1024), (8, 8192), (3, 24576)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel", BACKWARD_KERNELS[1:])
def test_backward_kernels_match_the_default(ext, device, dtype, shape, kernel):
    """Backward v2 takes `kernel`: the gradients match the default's up to rounding (the column sums are
    added in another order by another number of blocks), also where a kernel falls back to a simpler one."""
    x, w, b = inputs(shape, dtype, device)
    gy = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(device=device, dtype=dtype)
    # other row groups add in another order: a last-bit difference can flip a bf16 rounding
    tol = dict(rtol=2e-2, atol=2e-3) if dtype.itemsize == 2 else dict(rtol=1e-5, atol=1e-5)
    _, mean, rstd = ext.forward(x, w, b, EPS, 3)
    want = ext.backward(gy, x, mean, rstd, w, 2)
    with check.poisoned():
        got = ext.backward(gy, x, mean, rstd, w, 2, kernel)
    for name, a, e in zip(("grad_x", "grad_weight", "grad_bias"), got, want):
        check.assert_close(a, e, name=name, **tol)


def test_a_bad_kernel_name_lists_the_allowed_ones(ext, device):
    x, w, b = inputs((2, 8), torch.float32, device)
    _, mean, rstd = ext.forward(x, w, b)
    allowed = ", ".join(f'"{k}"' for k in FORWARD_KERNELS)
    with pytest.raises(ValueError, match=re.escape(f'forward kernel must be one of {allowed}, got "fast"')):
        ext.forward(x, w, b, EPS, 3, "fast")
    allowed = ", ".join(f'"{k}"' for k in BACKWARD_KERNELS)
    with pytest.raises(ValueError, match=re.escape(f'backward kernel must be one of {allowed}, got "pipelined"')):
        ext.backward(x, x, mean, rstd, w, 2, "pipelined")
    with pytest.raises(
        ValueError, match=re.escape('forward kernel="pipelined" is a kernel of version 3, got version 1')
    ):
        ext.forward(x, w, b, EPS, 1, "pipelined")
    with pytest.raises(
        ValueError, match=re.escape('backward kernel="cooperative" is a kernel of version 2, got version 1')
    ):
        ext.backward(x, x, mean, rstd, w, 1, "cooperative")
    with pytest.raises(TypeError):  # the integer configs are gone
        ext.forward(x, w, b, EPS, 3, 4)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_rows_with_a_large_mean_keep_their_variance(ext, device, version):
    """Rows with mean 1e4 and std 1 in float32: one-pass E[x^2] - E[x]^2 loses the variance entirely
    (x^2 ~ 1e8, whose float32 spacing is 8); the two-pass and Welford statistics keep it."""
    g = torch.Generator().manual_seed(0)
    x = (1e4 + torch.randn(8, 1024, generator=g)).to(device)
    w, b = torch.randn(1024, generator=g).to(device), torch.randn(1024, generator=g).to(device)
    one_pass_var = (x * x).mean(-1) - x.mean(-1) ** 2
    true_var = x.double().var(-1, unbiased=False)
    assert (one_pass_var.double() - true_var).abs().max() > 0.5, "the one-pass formula should fail here"
    y, mean, rstd = ext.forward(x, w, b, EPS, version)
    want_y, want_mean, want_rstd = expected(x, w, b)
    check.assert_close(rstd, want_rstd, name="rstd", rtol=1e-3, atol=0)
    check.assert_close(mean, want_mean, name="mean", rtol=5e-6, atol=0)
    # x - mean in float32 is only as exact as mean (spacing 1e-3 near 1e4, and v1 adds 1024 values of 1e4
    # one after the other): y is good to a few 1e-2 absolute. One pass would give NaN or errors of order 1.
    check.assert_close(y, want_y, name="y", rtol=0, atol=0.1)


def test_long_rows_with_a_large_mean(ext, device):
    """The Welford path (rows too long for registers) on the same kind of data."""
    g = torch.Generator().manual_seed(0)
    x = (1e4 + torch.randn(2, 65536, generator=g)).to(device)
    w, b = torch.ones(65536, device=device), torch.zeros(65536, device=device)
    y, mean, rstd = ext.forward(x, w, b, EPS, 3)
    want_y, want_mean, want_rstd = expected(x, w, b)
    check.assert_close(rstd, want_rstd, name="rstd", rtol=1e-3, atol=0)
    check.assert_close(y, want_y, name="y", rtol=0, atol=5e-2)


def test_autograd_through_a_loss_with_broadcast_grad(device):
    x = torch.randn(4, 33, device=device, requires_grad=True)
    w = torch.randn(33, device=device, requires_grad=True)
    b = torch.randn(33, device=device, requires_grad=True)
    (ln.layer_norm(x, w, b) ** 2).sum().backward()  # a real gradient
    ln.layer_norm(x, w, b).sum().backward()  # grad_y is an expanded (stride 0) tensor
    xr, wr, br = (t.detach().clone().requires_grad_() for t in (x, w, b))
    (F.layer_norm(xr, (33,), wr, br) ** 2).sum().backward()
    F.layer_norm(xr, (33,), wr, br).sum().backward()
    for ours, ref, name in ((x, xr, "x"), (w, wr, "weight"), (b, br, "bias")):
        check.assert_close(ours.grad, ref.grad, name=f"grad {name}", rtol=1e-4, atol=1e-4)


def test_module_matches_nn_layernorm(device):
    torch.manual_seed(0)
    ours, ref = ln.LayerNorm(48).to(device), torch.nn.LayerNorm(48).to(device)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 5, 48, device=device)
    check.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)
    ours(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    check.assert_close(ours.weight.grad, ref.weight.grad, rtol=1e-4, atol=1e-4)
    check.assert_close(ours.bias.grad, ref.bias.grad, rtol=1e-4, atol=1e-4)


def test_empty_input_gives_empty_result(ext, device):
    x = torch.empty(0, 5, device=device)
    w, b = torch.ones(5, device=device), torch.zeros(5, device=device)
    for version in (1, 2, 3):
        y, mean, rstd = ext.forward(x, w, b, EPS, version)
        assert y.shape == (0, 5) and mean.shape == (0,) and rstd.shape == (0,)
    gx, gw, gb = ext.backward(x, x, mean, rstd, w, 2)
    assert gx.shape == (0, 5)
    assert torch.equal(gw, torch.zeros(5, device=device)) and torch.equal(gb, torch.zeros(5, device=device))


@pytest.mark.parametrize(
    "make, exc, words",
    [
        (
            lambda d: (torch.ones(2, 4, device=d), torch.ones(5, device=d), torch.ones(4, device=d)),
            ValueError,
            "weight must have shape [4]",
        ),
        (
            lambda d: (torch.ones(2, 4, device=d), torch.ones(4, device=d), torch.ones(2, 4, device=d)),
            ValueError,
            "bias must have shape [4]",
        ),
        (
            lambda d: (torch.ones(2, 4, device=d), torch.ones(4, device="meta"), torch.ones(4, device=d)),
            RuntimeError,
            "weight must be on the same device as x",
        ),
        (
            lambda d: (
                torch.ones(2, 4, device=d),
                torch.ones(4, device=d, dtype=torch.float64),
                torch.ones(4, device=d),
            ),
            TypeError,
            "weight must have the dtype of x",
        ),
        (
            lambda d: (torch.ones(2, 4, device=d, dtype=torch.int32), torch.ones(4, device=d), torch.ones(4, device=d)),
            TypeError,
            "x must be float32",
        ),
        (
            lambda d: (torch.ones(3, 0, device=d), torch.ones(0, device=d), torch.ones(0, device=d)),
            ValueError,
            "at least 1",
        ),
        (
            lambda d: (torch.tensor(1.0, device=d), torch.ones(1, device=d), torch.ones(1, device=d)),
            ValueError,
            "scalar",
        ),
    ],
)
def test_bad_input_names_the_argument(ext, device, make, exc, words):
    x, w, b = make(device)
    with pytest.raises(exc, match=words.replace("[", r"\[").replace("]", r"\]")):
        ext.forward(x, w, b, EPS, 3)


def test_bad_arguments_and_backward_input(ext, device):
    x, w, b = inputs((2, 4), torch.float32, device)
    _, mean, rstd = ext.forward(x, w, b)
    with pytest.raises(ValueError, match="version must be between 1 and 3"):
        ext.forward(x, w, b, EPS, 4)
    with pytest.raises(ValueError, match="eps must be a finite number"):
        ext.forward(x, w, b, -1.0)
    with pytest.raises(ValueError, match="version must be between 1 and 2"):
        ext.backward(x, x, mean, rstd, w, 3)
    with pytest.raises(ValueError, match="grad_y must have shape"):
        ext.backward(x[:1], x, mean, rstd, w)
    with pytest.raises(TypeError, match="mean must be float32"):
        ext.backward(x, x, mean.double(), rstd, w)
    with pytest.raises(ValueError, match=r"rstd must have shape \[2\]"):
        ext.backward(x, x, mean, rstd[:1], w)
    with pytest.raises(ValueError, match=r"weight must have shape \[4\]"):
        ext.backward(x, x, mean, rstd, w[:3])


@needs_gpu
def test_cpu_weight_for_a_cuda_input_is_a_clear_error(ext):
    x = torch.ones(2, 4, device="cuda")
    with pytest.raises(RuntimeError, match=r"weight must be on the same device as x \(cuda:0\), got cpu"):
        ext.forward(x, torch.ones(4), torch.ones(4, device="cuda"))


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_misaligned_pointers_take_the_scalar_path(ext, dtype):
    base, w, b = inputs((4 * 1024 + 1,), dtype, "cuda")
    x = base[1:].view(4, 1024)  # contiguous, but 16-byte alignment is lost
    wa, ba = w[:1024], b[:1024]
    y, mean, rstd = ext.forward(x, wa, ba, EPS, 3)
    check.assert_close(y, expected(x, wa, ba)[0])
    gx, gw, gb = ext.backward(x, x, mean, rstd, wa, 2)
    gx2, gw2, gb2 = ext.backward(x.clone(), x.clone(), mean, rstd, wa.clone(), 2)
    check.assert_close(gx, gx2)
    check.assert_close(gw, gw2, rtol=1e-4, atol=1e-3)


@needs_gpu
@pytest.mark.parametrize("shape", [(4096, 1024), (300, 8192), (33, 65536)], ids=str)
def test_weight_gradient_is_deterministic(ext, shape):
    x, w, b = inputs(shape, torch.float32, "cuda")
    gy = torch.randn_like(x)
    _, mean, rstd = ext.forward(x, w, b)
    first = ext.backward(gy, x, mean, rstd, w, 2)
    for _ in range(3):
        again = ext.backward(gy, x, mean, rstd, w, 2)
        assert all(torch.equal(a, f) for a, f in zip(again, first))


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(4096, 1024), (1000, 4096), (300, 8192), (5, 96), (3000, 8), (7, 4097)], ids=str)
@pytest.mark.parametrize("kernel", BACKWARD_KERNELS)
def test_column_sums_are_deterministic_and_correct(ext, dtype, shape, kernel):
    """Every backward v2 kernel adds grad_weight and grad_bias in a fixed order (per-block partial sums, then
    over the blocks; "cooperative" and the bulk-copy kernels in one kernel after a grid barrier, sm_90+ for
    bulk copies, else "cooperative"): the same bits on every call, and the sums of a float64 reference up
    to rounding. Covers rows that take one block per pair of rows, tiny rows (fewer columns than blocks),
    and the scalar fallback."""
    x, w, b = inputs(shape, dtype, "cuda")
    gy = torch.randn(shape, generator=torch.Generator().manual_seed(3)).to(device="cuda", dtype=dtype)
    _, mean, rstd = ext.forward(x, w, b)
    with check.poisoned():
        first = ext.backward(gy, x, mean, rstd, w, 2, kernel)
    for _ in range(3):
        again = ext.backward(gy, x, mean, rstd, w, 2, kernel)
        for name, a, f in zip(("grad_x", "grad_weight", "grad_bias"), again, first):
            assert torch.equal(a, f), f"{name} differs between calls"
    xd, gd = x.double(), gy.double()
    md, rd = mean.double().unsqueeze(-1), rstd.double().unsqueeze(-1)
    rows = x.numel() // shape[-1]
    gw = (gd * (xd - md) * rd).reshape(rows, -1).sum(0)
    gb = gd.reshape(rows, -1).sum(0)
    tol = dict(rtol=1e-3, atol=1e-4 * rows) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-3 * rows**0.5)
    check.assert_close(first[1].double(), gw, name="grad_weight", **tol)
    check.assert_close(first[2].double(), gb, name="grad_bias", **tol)
    want = ext.backward(gy, x, mean, rstd, w, 2)
    check.assert_close(first[0], want[0], name="grad_x")


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(256, 4096), (1000, 1024), (7, 4097), (5000, 256), (3, 2, 8192)], ids=str)
def test_pipelined_forward_gives_the_same_bits(ext, dtype, shape):
    """The pipelined forward brings the rows through shared memory (cp.async, a persistent grid) instead of
    straight into registers and does the same arithmetic in the same order: the same bits. The default
    ("auto") picks one of the two, so it gives those bits too."""
    x, w, b = inputs(shape, dtype, "cuda")
    want = ext.forward(x, w, b, EPS, 3, "registers")
    for kernel in ("pipelined", "auto"):
        with check.poisoned():
            got = ext.forward(x, w, b, EPS, 3, kernel)
        for name, a, e in zip(("y", "mean", "rstd"), got, want):
            assert torch.equal(a, e), f"forward kernel={kernel!r}: {name} differs from kernel='registers'"


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(20000, 64), (9000, 256), (1000, 4096), (4, 1, 8192)], ids=str)
def test_many_rows_match_the_cpu_implementation(ext, dtype, shape):
    """More rows than the persistent backward grid holds at once: each block loops over many rows."""
    x, w, b = inputs(shape, dtype, "cpu")
    gy = torch.randn(shape).to(dtype)
    y, mean, rstd = ext.forward(x, w, b)
    gx, gw, gb = ext.backward(gy, x, mean, rstd, w)
    yc, mc, rc = ext.forward(x.cuda(), w.cuda(), b.cuda())
    gxc, gwc, gbc = ext.backward(gy.cuda(), x.cuda(), mc, rc, w.cuda())
    check.assert_close(yc.cpu(), y)
    check.assert_close(gxc.cpu(), gx, **grad_tolerances(dtype, 1)[0])
    rows = x.numel() // shape[-1]
    tol = dict(rtol=1e-3, atol=1e-4 * rows) if dtype == torch.float32 else {}
    check.assert_close(gwc.cpu(), gw, **tol)
    check.assert_close(gbc.cpu(), gb, **tol)


@pytest.mark.parametrize("name", ["layernorm.cu", "layernorm.hopper.cu"])
def test_kernel_file_header_maps_every_kernel(name):
    """The header of each LayerNorm kernel file is a map: every kernel it names exists, and every kernel
    the file defines is named there."""
    text = (loader.KERNELS / name).read_text()
    lines = text.splitlines()
    header = "\n".join(lines[: next(i for i, line in enumerate(lines) if not line.startswith("//"))])
    kernel = r"__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\("
    defined = set(re.findall(kernel, text))
    named = set(re.findall(r"\b(\w+_kernel)\b", header))
    everywhere = "".join((loader.KERNELS / f).read_text() for f in ("layernorm.cu", "layernorm.exercises.cu", name))
    assert defined and defined <= named, f"{name} defines kernels its header does not map: {sorted(defined - named)}"
    missing = named - set(re.findall(kernel, everywhere))
    assert not missing, f"{name}'s header names kernels that do not exist: {sorted(missing)}"
