"""Lesson 05's RMSNorm + dropout in one kernel (kernels/norm_dropout/norm_dropout.cu/.cpp, helpers/ops/norm_dropout.py):
y against the unfused pair course::rms_norm then course::dropout drawn at the same generator state, the
mask contract (philox::keep of the returned (seed, offset)), its statistics, reproducibility, gradients
against the unfused pair and gradcheck, p = 0 / p = 1 / eval mode, bad arguments, torch.compile and CUDA
graphs; on a GPU every kernel path (rows in registers at 16 and 32 values per thread, one block per row,
not vectorizable, a misaligned pointer).

opcheck runs from tests/ops/test_library.py (tests/op_samples.py's LIBRARY_OPS)."""

import math
import re

import pytest
import torch

from helpers import check
from helpers.ops import dropout as dp
from helpers.ops import norm_dropout as nd
from helpers.ops import rmsnorm as rms
from tests.conftest import load_solutions, needs_gpu

FLOATING = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SIGMAS = 6  # statistical bounds at 6 standard deviations


@pytest.fixture(scope="module")
def dropout_ext():
    nd.register()
    return load_solutions("dropout")  # keep_mask: philox::keep element by element on the CPU


def acc_of(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def seeded(device, seed):
    return torch.Generator(device=device).manual_seed(seed)


def nonzero_randn(*shape, dtype=torch.float64, device="cpu"):
    """Normal values kept away from 0 (|v| >= 0.01), so that y != 0 is exactly the mask in every dtype."""
    v = torch.randn(shape, dtype=torch.float64)
    return torch.where(v.abs() < 0.01, torch.full_like(v, 0.01), v).to(device, dtype)


def fused(x, shape, w, eps, p, seed, train=True):
    """The op at a freshly seeded generator: (y, rstd, rng_state)."""
    return torch.ops.course.rms_norm_dropout(x, shape, w, eps, p, train, seeded(x.device, seed))


def unfused(x, shape, w, eps, p, seed):
    """course::rms_norm, then course::dropout at the same freshly seeded generator: (y, rng_state)."""
    return torch.ops.course.dropout(torch.ops.course.rms_norm(x, shape, w, eps), p, True, seeded(x.device, seed))


def formula(x, w, rstd, keep, p):
    """What the fused kernel computes from its own rstd: x * rstd * w * (1 / (1 - p)) in the math type,
    left to right (the kernel's order), rounded once to x's dtype; 0 where dropped."""
    acc = acc_of(x.dtype)
    n = x.to(acc) * rstd.unsqueeze(-1) * (w.to(acc) if w is not None else 1)
    return dp.expected(n, keep, p).to(x.dtype)


def row_sum_rtol(dtype) -> float:
    """How far apart two GPU kernels' rstd of the same row may be when they add the squares in different
    orders (a few hundred units in the last place of the math type, relative)."""
    return 1e-13 if dtype == torch.float64 else 1e-5


def one_step(dtype) -> float:
    """One rounding step of dtype, relative: a value rounded once differs from one rounded twice by at most
    this (course::dropout rounds the normalized value to the dtype, then the scaled one)."""
    return torch.finfo(dtype).eps


# --------------------------------------------------------------------------------------------------
# y: the unfused pair's values and mask, from one kernel
# --------------------------------------------------------------------------------------------------

SHAPES = [(5, 37), (3, 1024), (2, 3, 4099)]  # not vectorizable, vectorizable, groups of 4 across rows


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_y_is_dropout_of_rms_norm_drawn_at_the_same_state(device, dtype, dropout_ext):
    """Under the same generator state: the same rng_state as course::dropout, the mask philox::keep of it
    (flat index of y), y = x * rstd * w / (1 - p) from the op's own rstd rounded once, rstd that of
    course::rms_norm_forward, and y the unfused pair's. On the CPU both add a row the same way, so float32 and
    float64 y are the same bits (both round once); on a GPU the two kernels may add a row in different
    orders, so rstd and y agree to row_sum_rtol. float16 and bfloat16 y differ by up to one rounding step
    more: the pair rounds the normalized value to the dtype, then the scaled one; the fused kernel once."""
    for shape in SHAPES:
        n = shape[-1]
        x = nonzero_randn(*shape, dtype=dtype, device=device)
        w = (torch.rand(n, dtype=torch.float64) + 0.5).to(device, dtype)
        y, rstd, state = fused(x, [n], w, None, 0.3, seed=7)
        y2, state2 = unfused(x, [n], w, None, 0.3, seed=7)
        assert torch.equal(state, state2), f"{shape}: rng_state {state.tolist()} vs course::dropout's {state2.tolist()}"
        keep = dropout_ext.keep_mask(int(state[0]), int(state[1]), x.numel(), 0.3).view(shape).to(device)
        assert torch.equal(y != 0, keep), f"{shape}: the mask is not philox::keep of the returned rng_state"
        assert torch.equal(y, formula(x, w, rstd, keep, 0.3)), f"{shape}: y is not x * rstd * w / (1 - p) rounded once"
        _, rstd2 = torch.ops.course.rms_norm_forward(x, [n], w, None)
        if device.type == "cpu":  # the same blocked row sum: the same bits
            assert torch.equal(rstd, rstd2), "rstd differs from course::rms_norm_forward's on the CPU"
            if dtype in (torch.float32, torch.float64):
                assert torch.equal(y, y2), f"{shape}: fused and unfused differ"
                continue
        else:  # course::rms_norm's GPU kernels may add a row's squares in another order (clusters on sm_90)
            check.assert_close(rstd, rstd2, rtol=row_sum_rtol(dtype), atol=0, name="rstd")
        rtol = row_sum_rtol(dtype) + (0 if dtype in (torch.float32, torch.float64) else one_step(dtype))
        check.assert_close(y, y2, rtol=rtol, atol=0, name=f"y {shape} vs the unfused pair")


# --------------------------------------------------------------------------------------------------
# The mask: statistics and the generator
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keep_rate_is_within_a_binomial_bound_and_calls_are_independent(device, p):
    rows, n = 512, 2048  # 2^20 elements
    x = torch.randn(rows, n, device=device)
    m1 = nd.rms_norm_dropout(x, [n], None, None, p) != 0
    m2 = nd.rms_norm_dropout(x, [n], None, None, p) != 0
    total = rows * n
    mean, sd = total * (1 - p), math.sqrt(total * p * (1 - p))
    kept = int(m1.sum())
    assert abs(kept - mean) <= SIGMAS * sd, f"kept {kept} of {total} at p={p}: expected {mean:.0f} +- {sd:.0f}"
    a, b = m1.double().flatten(), m2.double().flatten()
    a, b = a - a.mean(), b - b.mean()
    r = float((a * b).sum() / (a.norm() * b.norm()))
    assert abs(r) < SIGMAS / math.sqrt(total), f"two calls' masks: correlation {r:.5f}"
    rows_same = (m1[0] == m1[1]).double().mean().item()  # the mask is not one row's repeated
    assert abs(rows_same - (p * p + (1 - p) ** 2)) < SIGMAS * 0.5 / math.sqrt(n)


def test_manual_seed_reproduces_and_the_next_call_differs(device):
    x = torch.randn(7, 515, device=device)
    w = torch.randn(515, device=device)
    torch.manual_seed(3)
    a, b = nd.rms_norm_dropout(x, 515, w, p=0.5), nd.rms_norm_dropout(x, 515, w, p=0.5)
    torch.manual_seed(3)
    a2, b2 = nd.rms_norm_dropout(x, 515, w, p=0.5), nd.rms_norm_dropout(x, 515, w, p=0.5)
    assert torch.equal(a, a2) and torch.equal(b, b2), "torch.manual_seed did not reproduce the masks"
    assert not torch.equal(a != 0, b != 0), "the second call drew the same mask as the first"


# --------------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_gradients_are_the_unfused_pairs_and_only_16_bytes_of_mask_state_are_kept(device, dtype):
    """grad_x and grad_weight equal those of course::rms_norm then course::dropout drawn at the same state;
    autograd keeps x, weight, rstd and the int64 [2] rng_state, no mask. The op's backward (v2, fused) keeps
    the masked grad_y in float32 where the unfused pair rounds it to float16/bfloat16: there, each gradient is
    no farther from float64's than the unfused pair's (grad_weight sums rows that can nearly cancel, so the
    two roundings can differ by more than the dtype's tolerance of the small result)."""
    shape, n = (3, 5, 130), 130
    x0 = torch.randn(shape, dtype=torch.float64).to(device, dtype)
    w0 = torch.randn(n, dtype=torch.float64).to(device, dtype)
    g = torch.randn(shape, dtype=torch.float64).to(device, dtype)
    grads = []
    for f in ("fused", "unfused"):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            if f == "fused":
                y = nd.rms_norm_dropout(x, [n], w, None, 0.3, generator=seeded(device, 9))
                keep = y.detach() != 0
            else:
                y = dp.dropout(rms.rms_norm(x, [n], w, None), 0.3, generator=seeded(device, 9))
        grads.append(torch.autograd.grad(y, (x, w), g))
        if f == "fused":
            kinds = sorted((str(t.dtype), tuple(t.shape)) for t in saved)
            want = sorted(
                [(str(dtype), shape), (str(dtype), (n,)), (str(acc_of(dtype)), shape[:-1]), ("torch.int64", (2,))]
            )
            assert kinds == want, f"saved for backward: {kinds}"
    if dtype not in (torch.float16, torch.bfloat16):
        for name, got, want in zip(("grad_x", "grad_weight"), *grads):
            check.assert_close(got, want, name=name)
        return
    tol = check.tolerances(dtype)
    exact = reference_gradients(g, x0, w0, keep, 0.3)
    for name, fused, unfused, r in zip(("grad_x", "grad_weight"), *grads, exact):
        err_fused, err_unfused = (fused.double() - r).abs(), (unfused.double() - r).abs()
        worse = err_fused > err_unfused + tol["atol"] + tol["rtol"] * r.abs()
        assert not worse.any(), (
            f"{name}: {int(worse.sum())} elements farther from float64 than the unfused pair's, first at "
            f"{worse.nonzero()[0].tolist()}: fused error {err_fused[worse][0]:.3g}, unfused {err_unfused[worse][0]:.3g}"
        )


def reference_gradients(g, x, w, keep, p):
    """grad_x and grad_weight of where(keep, rms_norm(x) * w / (1 - p), 0) in float64 by autograd, from the
    same inputs (w None: a weight of ones, whose gradient backward returns too)."""
    n = x.shape[-1]
    xd = x.detach().double().requires_grad_()
    wd = (
        w.detach().double() if w is not None else torch.ones(n, dtype=torch.float64, device=x.device)
    ).requires_grad_()
    eps = torch.finfo(acc_of(x.dtype)).eps  # the op's default: its math type's
    y = torch.where(
        keep, rms.reference(xd, [n], wd, eps) / (1 - p), torch.zeros((), dtype=torch.float64, device=x.device)
    )
    return torch.autograd.grad(y, (xd, wd), g.double())


def backward_cases(device):
    """(shape, weight dtype or None, misaligned): vectorizable and not, no weight, a float32 weight beside a
    half x; on a GPU also rows too long for backward v2 (it falls back to v1) and a misaligned grad_y."""
    cases = [((70, 37), "x", False), ((3, 4, 128), None, False), ((9, 130), torch.float32, False)]
    if device.type == "cuda":
        cases += [((300, 1024), "x", False), ((7, 8192), "x", False), ((3, 20000), "x", False), ((65, 512), "x", True)]
    return cases


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_backward_v1_and_v2_give_autograds_gradients_of_the_same_mask(device, dtype, dropout_ext):
    """The module's backward, v1 (the two ops, what the op's autograd runs) and v2 (fused), against float64
    autograd of the masked norm with the mask philox::keep of the forward's rng_state."""
    ext = nd.extension("norm_dropout")
    for shape, wdtype, misaligned in backward_cases(device):
        n = shape[-1]
        if wdtype == torch.float32 and dtype not in (torch.float16, torch.bfloat16):
            continue
        x = torch.randn(shape, dtype=torch.float64).to(device, dtype)
        w = (
            None
            if wdtype is None
            else torch.randn(n, dtype=torch.float64).to(device, dtype if wdtype == "x" else wdtype)
        )
        buf = torch.randn(x.numel() + 1, dtype=torch.float64).to(device, dtype)
        g = (buf[1:] if misaligned else buf[:-1]).view(shape)
        _, rstd, state = torch.ops.course.rms_norm_dropout(x, [n], w, None, 0.3, True)
        keep = dropout_ext.keep_mask(int(state[0]), int(state[1]), x.numel(), 0.3).view(shape).to(device)
        want_x, want_w = reference_gradients(g, x, w, keep, 0.3)
        for version in (1, 2):
            gx, gw = ext.backward(g, x, rstd, w, state, 0.3, version)
            what = f"v{version} {shape} weight {wdtype}{' misaligned' if misaligned else ''}"
            assert gw.dtype == (w.dtype if w is not None else dtype), what
            check.assert_close(gx, want_x.to(dtype), name=f"grad_x {what}")
            scale = float(want_w.abs().max())  # a column sum over the rows: its error grows with its size
            check.assert_close(
                gw.double() / scale, want_w / scale, name=f"grad_weight {what}", **check.tolerances(dtype)
            )


def test_gradcheck_in_float64(device):
    """With the generator reseeded before each call the function is linear in the dropout: gradcheck's
    numerical derivative sees the mask backward regenerates; with and without weight, over two dimensions."""

    def f(x, w, shape):
        torch.manual_seed(11)
        return nd.rms_norm_dropout(x, shape, w, None, 0.4)

    x = torch.randn(4, 3, 9, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(9, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: f(x, w, [9]), (x, w))
    assert torch.autograd.gradcheck(lambda x: f(x, None, [3, 9]), (x,))


# --------------------------------------------------------------------------------------------------
# p = 0, p = 1, eval mode, the module
# --------------------------------------------------------------------------------------------------


def rng_state(device):
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


@pytest.mark.parametrize("p, train", [(0.0, True), (0.5, False), (1.0, True)], ids=["p0", "eval", "p1"])
def test_p_0_and_eval_are_rms_norm_and_p_1_is_zeros_drawing_nothing(device, p, train):
    x = torch.randn(6, 1001, device=device, requires_grad=True)
    w = torch.randn(1001, device=device, requires_grad=True)
    g = torch.randn(6, 1001, device=device)
    before = rng_state(device)
    y = nd.rms_norm_dropout(x, [1001], w, None, p, train)
    gx, gw = torch.autograd.grad(y, (x, w), g)
    assert torch.equal(rng_state(device), before), "the generator moved"
    if p == 1:
        assert torch.equal(y, torch.zeros_like(y)) and torch.equal(gx, torch.zeros_like(gx))
        assert torch.equal(gw, torch.zeros_like(gw))
    else:
        y2 = torch.ops.course.rms_norm(x, [1001], w, None)
        gx2, gw2 = torch.autograd.grad(y2, (x, w), g)
        assert torch.equal(y, y2) and torch.equal(gx, gx2) and torch.equal(gw, gw2)


def test_the_module_is_rms_norm_then_dropout_and_eval_turns_dropout_off(device):
    layer = nd.RMSNormDropout(64, p=0.25, device=device)
    native = torch.nn.RMSNorm(64, device=device)
    assert layer.state_dict().keys() == native.state_dict().keys()
    assert torch.equal(layer.weight, native.weight)
    assert repr(layer) == "RMSNormDropout((64,), p=0.25, eps=None, elementwise_affine=True)"
    x = torch.randn(8, 64, device=device)
    y = layer(x)
    assert 0 < int((y == 0).sum()) < y.numel()
    assert torch.equal(layer.eval()(x), torch.ops.course.rms_norm(x, [64], layer.weight, None))
    assert nd.RMSNormDropout(64, elementwise_affine=False).weight is None


# --------------------------------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------------------------------


def test_bad_arguments_are_clear_errors_naming_the_argument(dropout_ext):
    x, w = torch.ones(2, 4), torch.ones(4)
    op = torch.ops.course.rms_norm_dropout
    p_message = "p (the probability of zeroing an element) must be between 0 and 1, got {:g}"
    for p in (-0.1, 1.5, float("nan")):
        for call in (
            lambda: op(x, [4], w, None, p, True),
            lambda: op(x, [4], w, None, p, False),  # checked in eval mode too
            lambda: nd.rms_norm_dropout(x, 4, w, p=p),
            lambda: nd.RMSNormDropout(4, p=p),
        ):
            with pytest.raises(ValueError, match=re.escape(p_message.format(p))):
                call()
    cases = [
        (
            lambda: op(x.int(), [4], None, None, 0.5, True),
            TypeError,
            "x must be float32, float64, float16 or bfloat16, got Int",
        ),
        (lambda: op(x, [4], torch.ones(5), None, 0.5, True), ValueError, "weight must have shape [4], got [5]"),
        (
            lambda: op(x, [3], None, None, 0.5, True),
            ValueError,
            "x's last dimensions must be normalized_shape [3], got x of shape [2, 4]",
        ),
        (
            lambda: op(x, [4], w.double(), None, 0.5, True),
            TypeError,
            "weight must have the dtype of x (Float), got Double",
        ),
        (lambda: op(x, [4], w, -1.0, 0.5, True), ValueError, "eps must be a finite number >= 0"),
    ]
    for call, exc, message in cases:
        with pytest.raises(exc, match=re.escape(message)):
            call()


@needs_gpu
def test_a_generator_or_weight_on_another_device_is_refused():
    x = torch.ones(2, 4)
    with pytest.raises(RuntimeError, match=re.escape("generator must be on the device of x (cpu), got cuda")):
        nd.rms_norm_dropout(x, 4, p=0.5, generator=torch.Generator(device="cuda"))
    with pytest.raises(RuntimeError, match=re.escape("weight must be on the same device as x (cpu), got cuda:0")):
        nd.rms_norm_dropout(x, 4, torch.ones(4, device="cuda"), p=0.5)


# --------------------------------------------------------------------------------------------------
# torch.compile, CUDA graphs
# --------------------------------------------------------------------------------------------------


def test_compiled_fullgraph_draws_what_eager_draws_under_the_same_seed(device):
    """torch.compile(fullgraph=True): no graph break; under the same torch.manual_seed the same outputs and
    gradients as eager; two identical calls in one compiled function draw two masks."""
    torch._dynamo.reset()

    def fn(x, w):
        h = x * 1
        return nd.rms_norm_dropout(h, [x.shape[-1]], w, None, 0.5) * 2, nd.rms_norm_dropout(
            h, [x.shape[-1]], w, None, 0.5
        )

    # On the CPU without inductor's code generation (tens of seconds on 2 cores), but with what merges
    # common subexpressions: AOTAutograd's min-cut partitioner, which inductor uses too.
    backend = "inductor" if device.type == "cuda" else "aot_eager_decomp_partition"
    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    x = torch.randn(3, 257, device=device, requires_grad=True)
    w = torch.randn(257, device=device, requires_grad=True)
    g = torch.randn_like(x)
    results = []
    for f in (fn, compiled):
        torch.manual_seed(5)
        y1, y2 = f(x, w)
        results.append((y1, y2, *torch.autograd.grad(y1 + y2, (x, w), g)))
    for name, got, want in zip(("first call", "second call", "grad_x", "grad_weight"), results[1], results[0]):
        check.assert_close(got, want, name=f"compiled {name}")
    assert not torch.equal(results[1][0] != 0, results[1][1] != 0), "the compiled calls drew one mask"


@needs_gpu
def test_cuda_graph_replays_draw_new_masks_with_matching_gradients(dropout_ext):
    """Forward and backward captured in one graph: every replay draws a new mask, y follows the formula with
    that replay's mask, and grad_x is the unfused backward of that mask."""
    from helpers import library

    x = torch.randn(64, 1024, device="cuda", requires_grad=True)
    w = torch.randn(1024, device="cuda")
    g = torch.randn_like(x)
    out = {}

    def step():
        y, rstd, state = torch.ops.course.rms_norm_dropout(x, [1024], w, None, 0.5, True)
        out["y"], out["rstd"], out["state"] = y.detach(), rstd, state
        (out["gx"],) = torch.autograd.grad(y, x, g)

    replay, _ = library.captured(step)
    masks = []
    for _ in range(3):
        replay()
        torch.cuda.synchronize()
        keep = out["y"] != 0
        masks.append(keep.clone())
        state = out["state"].cpu()
        want = dropout_ext.keep_mask(int(state[0]), int(state[1]), x.numel(), 0.5).view(keep.shape)
        assert torch.equal(keep.cpu(), want), "a replay's mask is not philox::keep of its rng_state"
        assert torch.equal(out["y"], formula(x.detach(), w, out["rstd"], keep, 0.5))
        gy = torch.ops.course.dropout_backward(g, out["state"], 0.5)
        gx = torch.ops.course.rms_norm_backward(gy, x.detach(), [1024], out["rstd"], w, [True, False])[0]
        check.assert_close(out["gx"], gx, name="replayed grad_x")
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2]), "a replay reused a mask"


# --------------------------------------------------------------------------------------------------
# Every CUDA kernel path
# --------------------------------------------------------------------------------------------------

GPU_SHAPES = [  # (the path each takes in float32; float16/bfloat16 hold twice as many values in a pack)
    (33, 8192),  # rows in registers, 16 values per thread (float64 too, in 512 threads)
    (4, 24576),  # 32 values per thread (1536 threads at 16); float64: one block per row
    (3, 40000),  # one block per row, the row kept in shared memory (float64's 320 KB: read again)
    (2, 262144),  # one block per row, rows too long for shared memory: read again (L2)
    (5, 33333),  # not vectorizable, one block per row; groups of 4 across rows
    (64, 100),  # several rows per block (float16/bfloat16: not vectorizable)
    (64, 38),  # float64 vectorized with rows starting mid-group (38 % 4 == 2)
]


@needs_gpu
@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_every_cuda_path_follows_the_formula_and_the_mask_contract(dtype, dropout_ext):
    for shape in GPU_SHAPES:
        for misaligned in (False, True):
            n = shape[-1]
            buf = nonzero_randn(shape[0] * n + 1, dtype=dtype, device="cuda")
            x = (buf[1:] if misaligned else buf[:-1]).view(shape)  # [1:]: 16-byte loads impossible
            w = (torch.rand(n, device="cuda") + 0.5).to(dtype)
            y, rstd, state = torch.ops.course.rms_norm_dropout(x, [n], w, None, 0.2, True)
            keep = dropout_ext.keep_mask(int(state[0]), int(state[1]), x.numel(), 0.2).view(shape).cuda()
            what = f"{shape} {'misaligned' if misaligned else ''}"
            assert torch.equal(y != 0, keep), f"{what}: the mask is not philox::keep of rng_state"
            assert torch.equal(y, formula(x, w, rstd, keep, 0.2)), f"{what}: y is not the formula"
            rs = torch.rsqrt(x.double().pow(2).mean(-1) + torch.finfo(acc_of(dtype)).eps)
            check.assert_close(rstd.double(), rs, rtol=3e-5 if dtype != torch.float64 else 1e-12, atol=0, name="rstd")


def test_a_second_derivative_is_an_error_naming_the_op(device):
    x = torch.randn(3, 8, dtype=torch.float64, device=device, requires_grad=True)
    (gx,) = torch.autograd.grad(nd.rms_norm_dropout(x, 8, p=0.5).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=re.escape("course::rms_norm_dropout has no double backward")):
        torch.autograd.grad(gx.sum(), x)


def test_autocast_leaves_the_dtypes_as_native_rms_norm_and_dropout_do(device):
    x = torch.randn(4, 64, device=device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        assert nd.rms_norm_dropout(x, 64, p=0.5).dtype == nd.reference(x, 64, p=0.5).dtype == torch.float32
        assert nd.rms_norm_dropout(x.bfloat16(), 64, p=0.5).dtype == torch.bfloat16
