"""kernels/layernorm/: every version on the CPU and (on a GPU) CUDA against torch.nn.functional.layer_norm,
gradients, numerics on rows with a large mean, determinism, bad input; and (lesson 04) the registered ops
torch.ops.course.layer_norm, layer_norm_forward and layer_norm_backward: opcheck, native's arguments (several
normalized dimensions, None parameters, float32 parameters beside a half x), autocast, torch.compile, the
module against nn.LayerNorm, CUDA graph capture."""

import math
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


# The registered op (course::layer_norm_forward and layer_norm_backward) where a test takes a version: on the GPU
# it runs layernorm.route.cu's choice, the norm engine or the ladder's kAuto; versions 1-3 are the ladder alone.
OP = "op"


def run_forward(ext, x, w, b, version, kernel="auto"):
    if version == OP:
        return torch.ops.course.layer_norm_forward(x, [x.shape[-1]], w, b, EPS)
    return ext.forward(x, w, b, EPS, version, kernel)


def run_backward(ext, gy, x, mean, rstd, w, version):
    if version == OP:
        return torch.ops.course.layer_norm_backward(gy, x, [x.shape[-1]], mean, rstd, w, None, [True, True, True])
    return ext.backward(gy, x, mean, rstd, w, version)


def grad_tolerances(dtype, rows):
    if dtype == torch.float32:
        return dict(rtol=1e-4, atol=1e-4), dict(rtol=1e-4, atol=1e-5 * max(rows, 10))
    if dtype == torch.float64:
        return {}, {}
    return {}, {}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("version", [1, 2, 3, OP])
def test_forward_matches_layer_norm(ext, device, dtype, shape, version):
    x, w, b = inputs(shape, dtype, device)
    with check.poisoned():
        y, mean, rstd = run_forward(ext, x, w, b, version)
    want_y, want_mean, want_rstd = expected(x, w, b)
    # v1 (one thread per row) adds up to 65536 values one after the other in float32: errors ~3e-5.
    loose = dict(rtol=1e-4, atol=1e-4)
    check.assert_close(y, want_y, name="y", **(loose if dtype == torch.float32 else {}))
    check.assert_close(mean, want_mean, name="mean", **(loose if dtype != torch.float64 else {}))
    check.assert_close(rstd, want_rstd, name="rstd", **(loose if dtype != torch.float64 else {}))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("version", [1, 2, OP])
def test_backward_matches_autograd(ext, device, dtype, shape, version):
    x, w, b = inputs(shape, dtype, device)
    gy = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(device=device, dtype=dtype)
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, b))
    F.layer_norm(xd, (shape[-1],), wd, bd, EPS).backward(gy.double())
    _, mean, rstd = ext.forward(x, w, b, EPS, 3)
    with check.poisoned():
        gx, gw, gb = run_backward(ext, gy, x, mean, rstd, w, version)
    rows = x.numel() // shape[-1]
    tol_x, tol_w = grad_tolerances(dtype, rows)
    check.assert_close(gx, xd.grad.to(dtype), name="grad_x", **tol_x)
    check.assert_close(gw, wd.grad.to(dtype), name="grad_weight", **tol_w)
    check.assert_close(gb, bd.grad.to(dtype), name="grad_bias", **tol_w)


FORWARD_KERNELS = ["auto", "registers", "pipelined"]  # kernels/layernorm/layernorm_choices.h, forward v3
BACKWARD_KERNELS = ["auto", "two_kernels", "cooperative", "bulk_copy", "bulk_copy_split_barrier"]  # backward v2


def test_kernel_names_are_the_ones_in_the_header():
    """The names tests, benchmarks and notebook 03b use are the ones layernorm_choices.h maps to its enums."""
    text = (loader.KERNELS / "layernorm/layernorm_choices.h").read_text()
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
    # a kernel that sums in another order may round a 16-bit y the other way (the dtype's own tolerance);
    # float32 mean and rstd agree
    y_tol = {} if dtype.itemsize == 2 else dict(rtol=1e-5, atol=1e-5)
    for name, a, e in zip(("y", "mean", "rstd"), got, want):
        check.assert_close(a, e, name=name, **(y_tol if name == "y" else dict(rtol=1e-5, atol=1e-5)))


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


@pytest.mark.parametrize("n", [12288, 32768, 65536, 262144])
@pytest.mark.parametrize("kernel", [OP, "registers"])
def test_long_rows_with_a_large_mean(ext, device, n, kernel):
    """Rows longer than 8192 on the same kind of data: lesson 03's Welford path ("registers": rows too long
    for registers), and the op's, layernorm.wide.cu (lesson 05's kernels: two-pass statistics, from
    registers up to 32768, then from shared memory, or over a thread block cluster)."""
    g = torch.Generator().manual_seed(0)
    x = (1e4 + torch.randn(2, n, generator=g)).to(device)
    w, b = torch.ones(n, device=device), torch.zeros(n, device=device)
    y, mean, rstd = run_forward(ext, x, w, b, OP if kernel == OP else 3, kernel)
    check.assert_close(mean, expected(x, w, b)[1], name="mean", rtol=5e-6, atol=0)
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
@pytest.mark.parametrize("version", [2, OP])
def test_weight_gradient_is_deterministic(ext, shape, version):
    x, w, b = inputs(shape, torch.float32, "cuda")
    gy = torch.randn_like(x)
    _, mean, rstd = ext.forward(x, w, b)
    first = run_backward(ext, gy, x, mean, rstd, w, version)
    for _ in range(3):
        again = run_backward(ext, gy, x, mean, rstd, w, version)
        assert all(torch.equal(a, f) for a, f in zip(again, first))


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "shape", [(4096, 1024), (1000, 4096), (300, 8192), (261, 8192), (9, 8192), (5, 96), (3000, 8), (7, 4097)], ids=str
)
@pytest.mark.parametrize("kernel", BACKWARD_KERNELS)
def test_column_sums_are_deterministic_and_correct(ext, dtype, shape, kernel):
    """Every backward v2 kernel adds grad_weight and grad_bias in a fixed order (per-block partial sums, then
    over the blocks; "cooperative" and the bulk-copy kernels in one kernel after a grid barrier, sm_90+ for
    bulk copies, else "cooperative"): the same bits on every call, and the sums of a float64 reference up
    to rounding. Covers rows that take one block per pair of rows, tiny rows (fewer columns than blocks),
    and the scalar fallback; and on an H100 the bulk kernels' clusters of 2 (2-byte rows of 8192): 100
    blocks for 300 rows, 131 rounded up to 132 for 261 rows, 9 rounded up to 10 for 9 rows (a block with none)."""
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
@pytest.mark.parametrize(
    "shape",
    [
        (256, 4096),
        (1000, 1024),
        (7, 4097),
        (5000, 256),
        (3, 2, 8192),
        (20001, 256),
        (16385, 1024),
        (3000, 4096),
        (700, 8192),
    ],
    ids=str,
)
def test_pipelined_forward_gives_the_same_bits(ext, dtype, shape):
    """The pipelined forward brings the rows through shared memory (cp.async, a persistent grid) instead of
    straight into registers and does the same arithmetic in the same order: the same bits. The ladder's
    default ("auto") picks one of the two; the op (layernorm.route.cu) one of them or lesson 05's
    forward_kernel (one-wave batches; short rows in many waves, 20001x256 and 16385x1024, several rows per
    row group; 2-byte rows of 4096 and 8192 in many waves, 3000x4096 and 700x8192), which sums in the same
    order: those bits too."""
    x, w, b = inputs(shape, dtype, "cuda")
    want = ext.forward(x, w, b, EPS, 3, "registers")
    for kernel in ("pipelined", "auto", OP):
        with check.poisoned():
            got = run_forward(ext, x, w, b, OP if kernel == OP else 3, kernel)
        for name, a, e in zip(("y", "mean", "rstd"), got, want):
            assert torch.equal(a, e), f"forward kernel={kernel!r}: {name} differs from kernel='registers'"


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "shape",
    [
        (20000, 64),
        (9000, 256),
        (1000, 4096),
        (4, 1, 8192),
        (600, 16384),
        (1100, 16384),
        (200, 32768),
        (540, 32768),
        (120, 65536),
        (200, 65536),
        (5, 12289),
    ],
    ids=str,
)
@pytest.mark.parametrize("version", [OP, "ladder"])
def test_many_rows_match_the_cpu_implementation(ext, dtype, shape, version):
    """More rows than the persistent backward grid holds at once: each block loops over many rows. The
    ladder's rows longer than 8192 run its long-row kernels (Welford's statistics: float32 y to 1e-4, as in
    test_forward_matches_layer_norm); the op's run layernorm.wide.cu (lesson 05's kernels; on sm_90 the
    backward's clusters of 2, 4 and 8 blocks going round their rings of bulk copies: on an H100, clusters of
    8 up to 16 rows per cluster (600 x 16384, 200 x 32768), of 2 at 1100 x 16384 and of 4 at 540 x 32768;
    the forward's too, by one block per row at 200 x 32768 and by clusters of 2 at 200 x 65536, bf16 with 8
    packs of weights per thread), 12289 with one value per pack."""
    x, w, b = inputs(shape, dtype, "cpu")
    gy = torch.randn(shape).to(dtype)
    y, mean, rstd = ext.forward(x, w, b)
    gx, gw, gb = ext.backward(gy, x, mean, rstd, w)
    forward, backward = (3, 2) if version == "ladder" else (OP, OP)
    yc, mc, rc = run_forward(ext, x.cuda(), w.cuda(), b.cuda(), forward)
    gxc, gwc, gbc = run_backward(ext, gy.cuda(), x.cuda(), mc, rc, w.cuda(), backward)
    welford = version == "ladder" and dtype == torch.float32 and shape[-1] > 8192
    check.assert_close(yc.cpu(), y, **(dict(rtol=1e-4, atol=1e-4) if welford else {}))
    check.assert_close(gxc.cpu(), gx, **grad_tolerances(dtype, 1)[0])
    rows = x.numel() // shape[-1]
    tol = dict(rtol=1e-3, atol=1e-4 * rows) if dtype == torch.float32 else {}
    check.assert_close(gwc.cpu(), gw, **tol)
    check.assert_close(gbc.cpu(), gb, **tol)


def test_describe_names_the_ops_route(ext, device):
    """The module's describe(x, direction) names what course::layer_norm runs for x (layernorm.route.cu): on the
    CPU the CPU code; on the GPU the norm engine for long rows and small batches, the ladder for double and for
    large 2-byte batches of rows up to 8192 backward. Lesson 03's forward(version=3, "auto") is the ladder
    alone: at N = 65536 the same long-row kernel as "registers", the same bits."""
    with pytest.raises(ValueError, match='direction must be "forward" or "backward", got "sideways"'):
        ext.describe(torch.ones(2, 4, device=device), "sideways")
    assert ext.describe(torch.ones(0, 4, device=device)) == "none: x has no values (the op launches no kernel)"
    if device.type == "cpu":
        assert ext.describe(torch.ones(2, 4)) == "cpu: layernorm_forward_cpu"
        assert ext.describe(torch.ones(2, 4), "backward") == "cpu: layernorm_backward_cpu"
        return
    empty = lambda m, n, dtype: torch.empty(m, n, device=device, dtype=dtype)  # noqa: E731
    assert ext.describe(empty(2, 65536, torch.float32)).startswith("norm engine: ")
    assert ext.describe(empty(2, 65536, torch.float32), "backward").startswith("norm engine: ")
    assert ext.describe(empty(1, 4096, torch.bfloat16), "backward").startswith("norm engine: ")
    assert ext.describe(empty(64, 1024, torch.float64)) == "ladder: forward v3, kAuto (layernorm_choices.h)"
    assert ext.describe(empty(4096, 4096, torch.bfloat16), "backward").startswith("ladder: backward v2")
    x, w, b = inputs((2, 65536), torch.float32, device)
    auto, registers = ext.forward(x, w, b, EPS, 3, "auto"), ext.forward(x, w, b, EPS, 3, "registers")
    assert all(torch.equal(a, r) for a, r in zip(auto, registers))


@pytest.mark.parametrize("name", ["layernorm/layernorm.cu", "layernorm/layernorm.hopper.cu", "norm_engine/rounds.cuh"])
def test_kernel_file_header_maps_every_kernel(name):
    """The header of each LayerNorm kernel file is a map: every kernel it names exists, and every kernel
    the file defines is named there."""
    text = (loader.KERNELS / name).read_text()
    lines = text.splitlines()
    header = "\n".join(lines[: next(i for i, line in enumerate(lines) if not line.startswith("//"))])
    kernel = r"__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\("
    defined = set(re.findall(kernel, text))
    named = set(re.findall(r"\b(\w+_kernel)\b", header))
    files = ("layernorm/layernorm.cu", "layernorm/layernorm.exercises.cu", "norm_engine/rounds.cuh", name)
    everywhere = "".join((loader.KERNELS / f).read_text() for f in files)
    assert defined and defined <= named, f"{name} defines kernels its header does not map: {sorted(defined - named)}"
    missing = named - set(re.findall(kernel, everywhere))
    assert not missing, f"{name}'s header names kernels that do not exist: {sorted(missing)}"


# ---------------------------------------------------------------------------------------------------------------
# Lesson 04: torch.ops.course.layer_norm, layer_norm_forward and layer_norm_backward (kernels/layernorm/layernorm.cpp, fake
# kernels in helpers/ops/layernorm.py). PyTorch's own sample inputs: tests/ops/test_layernorm_opinfo.py.
# ---------------------------------------------------------------------------------------------------------------

REDUCED = [torch.float16, torch.bfloat16]


def op_cases(device, dtype):
    """(id, x, normalized_shape, weight, bias, eps): the odd shapes and arguments the op takes."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, dt=dtype):
        return (torch.randn(shape, generator=g) * 2 + 0.5).to(device=device, dtype=dt)

    cases = [
        ("M0", t(0, 5), [5], t(5), t(5), EPS),
        ("M0_3d", t(2, 0, 7), [7], t(7), t(7), EPS),
        ("N1", t(4, 1), [1], t(1), t(1), EPS),
        ("transposed_x", t(7, 3).t(), [7], t(7), t(7), EPS),
        ("3d", t(2, 3, 33), [33], t(33), t(33), 1e-3),
        ("two_dims", t(2, 3, 4), [3, 4], t(3, 4), t(3, 4), EPS),
        ("all_dims", t(2, 3, 4), [2, 3, 4], t(2, 3, 4), t(2, 3, 4), EPS),
        ("no_weight", t(5, 8), [8], None, t(8), EPS),
        ("no_bias", t(5, 8), [8], t(8), None, EPS),
        ("neither", t(5, 130), [130], None, None, EPS),
        ("strided_params", t(4, 6), [6], t(12)[::2], t(12)[::2], EPS),
    ]
    if dtype in REDUCED:  # native's mixed case: float32 parameters beside a float16/bfloat16 x
        cases.append(("float32_params", t(3, 16), [16], t(16, dt=torch.float32), t(16, dt=torch.float32), EPS))
        cases.append(("float32_weight_only", t(3, 16), [16], t(16, dt=torch.float32), None, EPS))
    return cases


DTYPE_CASES = [(dtype, c[0]) for dtype in DTYPES for c in op_cases("cpu", dtype)]


def op_case(device, dtype, name):
    return next(c[1:] for c in op_cases(device, dtype) if c[0] == name)


def grad_leaves(x, w, b):
    return [t if t is None else t.detach().clone().requires_grad_() for t in (x, w, b)]


@pytest.mark.parametrize("dtype, case", DTYPE_CASES, ids=[f"{c}-{str(d)[6:]}" for d, c in DTYPE_CASES])
def test_opcheck_every_op(device, dtype, case):
    """torch.library.opcheck (schema, autograd registration, fake kernel against the real one, AOT dispatch
    with dynamic shapes) for layer_norm with inputs that require grad, layer_norm_forward, and
    layer_norm_backward with every output_mask that autograd asks for."""
    ln.register()
    x, shape, w, b, eps = op_case(device, dtype, case)
    torch.library.opcheck(
        torch.ops.course.layer_norm.default, (*grad_leaves(x, w, b)[:1], shape, *grad_leaves(x, w, b)[1:], eps)
    )
    torch.library.opcheck(torch.ops.course.layer_norm_forward.default, (x, shape, w, b, eps))
    _, mean, rstd = torch.ops.course.layer_norm_forward(x, shape, w, b, eps)
    gy = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    for mask in ([True, w is not None, b is not None], [True, False, False], [False, True, True]):
        args = (gy, x, shape, mean, rstd, w, b, mask)
        torch.library.opcheck(torch.ops.course.layer_norm_backward.default, args)


@pytest.mark.parametrize("dtype, case", DTYPE_CASES, ids=[f"{c}-{str(d)[6:]}" for d, c in DTYPE_CASES])
def test_op_matches_native_layer_norm(device, dtype, case):
    """Output and gradients (of x and of each parameter given) against native F.layer_norm in float64 on the
    same values, rounded; dtypes and shapes as native's in the case's own dtypes (float32 parameters of a
    half x get float32 gradients)."""
    x, shape, w, b, eps = op_case(device, dtype, case)
    mixed_on_gpu = device.type == "cuda" and w is not None and w.dtype != x.dtype
    ours = grad_leaves(x, w, b)
    # native CUDA layer_norm refuses float32 parameters beside a half x ("expected scalar type Half but found
    # Float", torch 2.11) where the CPU one takes them: ours takes them on both, with the CPU's dtypes
    native = grad_leaves(*[t if t is None else t.cpu() for t in (x, w, b)]) if mixed_on_gpu else grad_leaves(x, w, b)
    wide = [t if t is None else t.detach().double().requires_grad_() for t in (x, w, b)]
    with check.poisoned():
        y = ln.layer_norm_like_native(ours[0], shape, ours[1], ours[2], eps)
    want = F.layer_norm(native[0], shape, native[1], native[2], eps)
    exact = F.layer_norm(wide[0], shape, wide[1], wide[2], eps)
    assert (y.dtype, y.shape) == (want.dtype, want.shape) and y.is_contiguous()
    # on the GPU a float32 weight and bias are rounded to x's dtype first: up to 2 more roundings in y
    tol_y = dict(rtol=3e-2, atol=5e-2) if mixed_on_gpu else {}
    check.assert_close(y, exact.to(y.dtype), name="y", **tol_y)
    gy = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    leaves = [i for i, t in enumerate(ours) if t is not None]
    with check.poisoned():
        got = torch.autograd.grad(y, [ours[i] for i in leaves], gy)
    theirs = torch.autograd.grad(want, [native[i] for i in leaves], gy.to(want.device))
    wanted = torch.autograd.grad(exact, [wide[i] for i in leaves], gy.double())
    rows = max(1, x.numel() // max(1, math.prod(shape)))
    for i, g, n, e in zip(leaves, got, theirs, wanted):
        name = ("grad_x", "grad_weight", "grad_bias")[i]
        assert (g.dtype, g.shape) == (n.dtype, n.shape), name
        if i == 0:
            tol = grad_tolerances(dtype, rows)[0]
        elif g.dtype == torch.float32 and dtype in REDUCED and device.type == "cpu":
            tol = dict(rtol=1e-4, atol=1e-4)  # summed in float and kept float32, as native does
        elif g.dtype == torch.float32 and dtype in REDUCED:
            tol = dict(rtol=1e-2, atol=1e-2 * rows**0.5)  # GPU: summed in float, rounded to x's dtype once
        else:
            tol = grad_tolerances(dtype, rows)[1]
        check.assert_close(g, e.to(g.dtype), name=name, **tol)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_float32_parameters_beside_a_half_input_like_native(device, dtype):
    """What native layer_norm allows on the CPU, and ours on both devices (the mixed case): x float16/bfloat16,
    weight and bias float32 ->
    y in x's dtype, grad_weight and grad_bias float32. One float32 and one half parameter, or float32 for a
    float32 x's float64 parameters, are refused as native refuses them."""
    x = torch.randn(64, 256, device=device).to(dtype)
    w, b = torch.randn(256, device=device), torch.randn(256, device=device)
    y = ln.layer_norm(x, w, b)
    # (native CUDA layer_norm refuses this mix, torch 2.11: its CPU kernel defines the dtypes)
    assert y.dtype == dtype == F.layer_norm(x.cpu(), (256,), w.cpu(), b.cpu()).dtype
    with pytest.raises(TypeError, match="weight and bias must have the same dtype"):
        ln.layer_norm(x, w, b.to(dtype))
    with pytest.raises(TypeError, match=re.escape("or be float32 (Float), got Double")):
        ln.layer_norm(x, w.double(), b.double())
    with pytest.raises(TypeError, match=re.escape("weight must have the dtype of x (Float), got Double")):
        ln.layer_norm(x.float(), w.double(), b.double())


def test_autocast_kernels_are_where_native_has_them():
    """Native layer_norm is on CUDA autocast's float32 list and has no CPU autocast rule (checked on the CPU:
    under torch.autocast("cpu") it runs in the input's dtype). Ours has the same autocast keys."""
    ln.register()

    def autocast_keys(op):
        table = torch._C._dispatch_dump(op)
        return {key for key in ("AutocastCPU", "AutocastCUDA") if re.search(rf"^{key}:", table, re.M)}

    assert autocast_keys("aten::layer_norm") == {"AutocastCUDA"} == autocast_keys("course::layer_norm")


@pytest.mark.parametrize(
    "x_dtype, p_dtype",
    [(torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.bfloat16, torch.bfloat16)],
    ids=str,
)
def test_cpu_autocast_matches_native(x_dtype, p_dtype):
    """Under torch.autocast("cpu", bfloat16) native layer_norm keeps its input's dtype (no CPU autocast rule);
    ours gives the same dtypes and values, forward and backward."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 64, generator=g).to(x_dtype)
    w, b = torch.randn(64, generator=g).to(p_dtype), torch.randn(64, generator=g).to(p_dtype)
    ours, native = grad_leaves(x, w, b), grad_leaves(x, w, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = ln.layer_norm(*ours)
        want = F.layer_norm(native[0], (64,), native[1], native[2], EPS)
    assert y.dtype == want.dtype == x_dtype
    check.assert_close(y, want)
    gy = torch.randn(y.shape, generator=g).to(y.dtype)
    for got, exp, name in zip(torch.autograd.grad(y, ours, gy), torch.autograd.grad(want, native, gy), "xwb"):
        assert got.dtype == exp.dtype, name
        check.assert_close(got, exp, name=f"grad {name}", rtol=2e-2, atol=2e-2)


@needs_gpu
@pytest.mark.parametrize(
    "x_dtype, p_dtype",
    [
        (torch.bfloat16, torch.bfloat16),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float16, torch.float16),
    ],
    ids=str,
)
def test_cuda_autocast_runs_in_float32_like_native(x_dtype, p_dtype):
    """Under torch.autocast("cuda", bfloat16) native layer_norm casts its inputs to float32 (CUDA's float32
    list): ours too, so y is float32 and the values are float32's; the gradients come back in each input's
    dtype through the casts."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 512, generator=g).to("cuda", x_dtype)
    w, b = (torch.randn(512, generator=g).to("cuda", p_dtype) for _ in range(2))
    ours, native = grad_leaves(x, w, b), grad_leaves(x, w, b)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = ln.layer_norm(*ours)
        want = F.layer_norm(native[0], (512,), native[1], native[2], EPS)
    assert y.dtype == want.dtype == torch.float32
    check.assert_close(y, want, rtol=1e-5, atol=1e-5)
    gy = torch.randn(y.shape, generator=g).to("cuda")
    for got, exp, name in zip(torch.autograd.grad(y, ours, gy), torch.autograd.grad(want, native, gy), "xwb"):
        assert got.dtype == exp.dtype, name
        tol = dict(rtol=1e-4, atol=1e-3) if got.dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
        check.assert_close(got, exp, name=f"grad {name}", **tol)


MODULE_CONFIGS = {
    "affine": dict(normalized_shape=48),
    "no_bias": dict(normalized_shape=48, bias=False),
    "no_affine": dict(normalized_shape=48, elementwise_affine=False),
    "two_dims": dict(normalized_shape=(6, 8), eps=1e-3),
}


def _modules(config, device, dtype=torch.float32):
    torch.manual_seed(0)
    ours = ln.LayerNorm(**config, device=device, dtype=dtype)
    ref = torch.nn.LayerNorm(**config, device=device, dtype=dtype)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_()
    ours.load_state_dict(ref.state_dict())
    return ours, ref


def _x_for(module, device, batch=2, dtype=torch.float32):
    g = torch.Generator().manual_seed(batch)
    return torch.randn(batch, 5, *module.normalized_shape, generator=g).to(device, dtype).requires_grad_()


@pytest.mark.parametrize("config", MODULE_CONFIGS.values(), ids=MODULE_CONFIGS)
def test_module_takes_what_nn_layernorm_takes(device, config):
    """The same parameters (None where nn.LayerNorm has None), initialization, repr and state_dict; the
    same output and gradients."""
    torch.manual_seed(0)
    fresh_ours, fresh_ref = ln.LayerNorm(**config, device=device), torch.nn.LayerNorm(**config, device=device)
    assert repr(fresh_ours).split("(", 1)[1] == repr(fresh_ref).split("(", 1)[1]
    assert [(n, p.shape) for n, p in fresh_ours.named_parameters()] == [
        (n, p.shape) for n, p in fresh_ref.named_parameters()
    ]
    assert (fresh_ours.weight is None, fresh_ours.bias is None) == (fresh_ref.weight is None, fresh_ref.bias is None)
    for a, r in zip(fresh_ours.parameters(), fresh_ref.parameters()):
        assert torch.equal(a, r)  # ones and zeros: reset_parameters
    ours, ref = _modules(config, device)
    x = _x_for(ours, device)
    xr = x.detach().clone().requires_grad_()
    y, want = ours(x), ref(xr)
    check.assert_close(y, want, rtol=1e-5, atol=1e-5)
    gy = torch.randn_like(y)
    y.backward(gy)
    want.backward(gy)
    check.assert_close(x.grad, xr.grad, name="grad x", rtol=1e-4, atol=1e-4)
    for (name, p), r in zip(ours.named_parameters(), ref.parameters()):
        check.assert_close(p.grad, r.grad, name=f"grad {name}", rtol=1e-4, atol=1e-4)
    assert y.grad_fn.name() == "LayerNormBackward (course::layer_norm)"  # the C++ node: no Python in the step
    assert not isinstance(y.grad_fn, torch.autograd.function.BackwardCFunction)


@pytest.mark.parametrize("config", MODULE_CONFIGS.values(), ids=MODULE_CONFIGS)
def test_module_compiles_fullgraph_and_matches_eager(device, config):
    """torch.compile(fullgraph=True) around the module: no graph break (torch._dynamo.explain), forward and
    backward (AOTAutograd's graphs of layer_norm_forward and layer_norm_backward, traced with the fakes)
    equal to eager; a second batch size recompiles with dynamic shapes (the fakes with symbolic sizes)."""
    module, _ = _modules(config, device)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(module)(_x_for(module, device))
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    compiled = torch.compile(module, fullgraph=True)
    for batch in (2, 3, 4):
        x = _x_for(module, device, batch)
        xe = x.detach().clone().requires_grad_()
        y, want = compiled(x), module(xe)
        check.assert_close(y, want, rtol=1e-6, atol=1e-6)
        gy = torch.randn_like(y)
        got = torch.autograd.grad(y, [x, *module.parameters()], gy)
        exp = torch.autograd.grad(want, [xe, *module.parameters()], gy)
        for name, a, e in zip(["x", *dict(module.named_parameters())], got, exp):
            check.assert_close(a, e, name=f"grad {name}", rtol=1e-6, atol=1e-6)


def test_functional_calls_compile_without_graph_breaks(device):
    x = torch.randn(4, 6, 8, device=device, requires_grad=True)
    w, b = torch.randn(8, device=device), torch.randn(6, 8, device=device)

    def fn(x):
        return ln.layer_norm(x, w, None) * 2 + ln.layer_norm_like_native(x, (6, 8), None, b)

    torch._dynamo.reset()
    assert torch._dynamo.explain(fn)(x).graph_break_count == 0
    check.assert_close(torch.compile(fn, fullgraph=True)(x), fn(x), rtol=1e-6, atol=1e-6)


def test_the_pybind_binding_is_the_same_op(ext, device):
    x, w, b = inputs((3, 2, 16), torch.float32, device)
    assert torch.equal(ext.layer_norm(x, [2, 16], None, None), ln.layer_norm_like_native(x, (2, 16)))
    assert torch.equal(ext.layer_norm(x, [16], w, b, EPS), ln.layer_norm(x, w, b))
    y = ext.layer_norm(x.requires_grad_(), [16], w, b)
    assert y.grad_fn.name() == "LayerNormBackward (course::layer_norm)"


def test_lesson_versions_need_weight_and_bias(device):
    x, w, _ = inputs((2, 8), torch.float32, device)
    with pytest.raises(ValueError, match="None for either needs version=None"):
        ln.layer_norm(x, w, None, version=1)


def test_op_refuses_bad_shapes_naming_them(device):
    x = torch.ones(2, 3, 4, device=device)
    with pytest.raises(
        ValueError, match=re.escape("x's last dimensions must be normalized_shape [2, 4], got x of shape [2, 3, 4]")
    ):
        ln.layer_norm_like_native(x, (2, 4))
    with pytest.raises(ValueError, match=re.escape("normalized_shape must have at least one dimension, got []")):
        ln.layer_norm_like_native(x, ())
    with pytest.raises(ValueError, match=re.escape("weight must have shape [3, 4], got [12]")):
        ln.layer_norm_like_native(x, (3, 4), torch.ones(12, device=device))
    with pytest.raises(ValueError, match=re.escape("x's last dimensions must be normalized_shape [1, 2, 3, 4]")):
        ln.layer_norm_like_native(x, (1, 2, 3, 4))
    ln.register()
    with pytest.raises(ValueError, match=re.escape("mean must have shape [2, 3], got [6]")):
        torch.ops.course.layer_norm_backward(
            x, x, [4], torch.ones(6, device=device), torch.ones(2, 3, device=device), None, None, [True, True, True]
        )


def test_backward_op_returns_only_what_output_mask_asks_for(device):
    """Left-out gradients are empty [0] tensors; grad_weight and grad_bias are computed where the parameter
    is None too (the sums of grad_y * xhat and of grad_y), in the parameters' dtype (x's when both None)."""
    ln.register()
    x = torch.randn(6, 2, 5, device=device, dtype=torch.bfloat16)
    _, mean, rstd = torch.ops.course.layer_norm_forward(x, [2, 5], None, None, EPS)
    gy = torch.randn_like(x)
    gx, gw, gb = torch.ops.course.layer_norm_backward(gy, x, [2, 5], mean, rstd, None, None, [False, True, True])
    assert gx.shape == (0,) and gw.shape == gb.shape == (2, 5) and gw.dtype == torch.bfloat16
    xhat = (x.float() - mean.float()[..., None, None]) * rstd[..., None, None]
    check.assert_close(gw, (gy.float() * xhat).sum(0).to(torch.bfloat16), name="grad_weight", rtol=2e-2, atol=2e-2)
    check.assert_close(gb, gy.float().sum(0).to(torch.bfloat16), name="grad_bias", rtol=2e-2, atol=2e-2)
    w = torch.ones(2, 5, device=device)
    gx, gw, gb = torch.ops.course.layer_norm_backward(gy, x, [2, 5], mean, rstd, w, None, [True, False, False])
    assert gx.shape == x.shape and gw.shape == gb.shape == (0,) and gw.dtype == gb.dtype == torch.float32


@needs_gpu
@pytest.mark.parametrize("config", MODULE_CONFIGS.values(), ids=MODULE_CONFIGS)
def test_cuda_graph_capture_of_forward_and_backward(config):
    """The module's forward and backward (torch.autograd.grad) captured in a CUDA graph, after a warm-up on a
    side stream as PyTorch's docs do it: replayed on new input values, the same bits as eager (the kernels
    are deterministic)."""
    module, _ = _modules(config, "cuda", torch.bfloat16)
    params = list(module.parameters())
    x = _x_for(module, "cuda", 64, torch.bfloat16)
    gy = torch.randn(x.shape, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.autograd.grad(module(x), [x, *params], gy)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = module(x)
        grads = torch.autograd.grad(y, [x, *params], gy)
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
        gy.copy_(torch.randn_like(gy))
    graph.replay()
    torch.cuda.synchronize()
    want = module(x)
    want_grads = torch.autograd.grad(want, [x, *params], gy)
    assert torch.equal(y, want)
    for name, a, e in zip(["x", *dict(module.named_parameters())], grads, want_grads):
        assert torch.equal(a, e), f"grad {name} differs from eager after replay"


@needs_gpu
def test_cuda_graph_capture_of_a_new_none_parameter_size():
    """A None weight and bias on the GPU read a row of ones and zeros made once per size and kept: one made
    during a capture belongs to the graph (its fill runs on replay) and is not kept."""
    ln.register()
    x = torch.randn(32, 1000, device="cuda")
    graph = torch.cuda.CUDAGraph()
    torch.ops.course.layer_norm(torch.randn(4, 40, device="cuda"), [40], None, None, EPS)  # CUDA, planned
    with torch.cuda.graph(graph):
        y = torch.ops.course.layer_norm(x, [1000], None, None, EPS)  # N = 1000 first seen here
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    check.assert_close(y, F.layer_norm(x, (1000,)), rtol=1e-5, atol=1e-5)
    check.assert_close(ln.layer_norm_like_native(x, 1000), F.layer_norm(x, (1000,)), rtol=1e-5, atol=1e-5)


def test_the_hand_written_node_keeps_autograds_rules(device):
    """course::layer_norm's backward node is written by hand (kernels/layernorm/layernorm.autograd.cpp): it must still refuse what
    autograd refuses. An input changed in place after the forward, a second backward through a freed graph,
    a forward-mode tangent: each an error, never a silently wrong gradient."""
    x, w, b = inputs((3, 16), torch.float32, device)
    x, w = x.requires_grad_(), w.requires_grad_()
    y = ln.layer_norm(x * 1, w, b)  # x * 1: a non-leaf we may change in place
    assert y.grad_fn.next_functions[0][0] is not None and y.grad_fn.next_functions[2][0] is None  # b: no grad
    y.sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.sum().backward()
    h = x * 1
    y = ln.layer_norm(h, w, b)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level(), pytest.raises(RuntimeError, match="course::layer_norm has no forward-mode derivative"):
        ln.layer_norm(fwAD.make_dual(x.detach(), torch.ones_like(x)), w, b)
    with torch.no_grad():
        assert ln.layer_norm(x, w, b).grad_fn is None
