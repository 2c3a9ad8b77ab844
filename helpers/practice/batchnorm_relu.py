"""The grader's spec for lesson 09's course::batchnorm_relu: fused BatchNorm + ReLU in training (statistics of the
batch, running statistics updated in place), its backward, and the inference fold of a BatchNorm into the
convolution before it (fold_conv_bn, Python).

Every check draws its inputs from the run's seed and compares against float64 references computed after the call
from copies of the inputs made before it. The references:

    forward    mean and biased var of each channel over N, H, W; y = relu((x - mean) / sqrt(var + eps) * w + b)
    running    running = (1 - momentum) * running + momentum * stat, with the unbiased var (M / (M - 1))
    backward   g = grad_y * (y > 0), y the op's own output (the mask the op promises to use);
               grad_bias = sum(g), grad_weight = sum(g * xhat), grad_x = w * rstd * (g - mean(g) - xhat * mean(g xhat))

Tolerances: the output dtype's (helpers.grade.TOLERANCES), plus the error that float math itself makes on these
inputs (a few units of float's rounding, 2^-24, times the size of the terms: x - mean when the channel's mean is
large beside its spread, the sums of the backward), so that a correct float kernel passes and a variance taken
from E[x^2] - mean^2, or a term left out, does not.
"""

from __future__ import annotations

from helpers import grade, grade_corpus
from helpers.grade import IMPOSSIBLE_PCT, TOLERANCES, Fail, Skip, _canary

NAME = "batchnorm_relu"
SCHEMAS = {
    "course::batchnorm_relu": "course::batchnorm_relu(Tensor x, Tensor weight, Tensor bias, Tensor(a!) running_mean, "
    "Tensor(b!) running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)",
    "course::batchnorm_relu_backward": "course::batchnorm_relu_backward(Tensor grad_y, Tensor y, Tensor x, "
    "Tensor weight, Tensor mean, Tensor rstd) -> (Tensor, Tensor, Tensor)",
}
CHECKS = [
    "build",
    "registered",
    "forward",
    "inputs_unchanged",
    "running_stats",
    "backward",
    "errors",
    "opcheck",
    "compile",
    "fold",
    "stream",
    "speed",
    "integrity",
]
TASK = (
    "Fused BatchNorm + ReLU for training, x [N, C, H, W] in NCHW or channels-last: per channel, the batch's mean "
    "and biased variance over N * H * W values (a numerically safe reduction: Welford per thread, Chan's merge), "
    "y = relu((x - mean) * rstd * weight + bias), the running statistics updated in place as nn.BatchNorm2d does "
    "(the unbiased variance); the backward's two per-channel sums and grad_x; the autograd formula; and "
    "fold_conv_bn, the inference fold of a BatchNorm into the convolution before it."
)
LINES = 135

# ------------------------------------------------------------------------------------------------
# Inputs and references
# ------------------------------------------------------------------------------------------------

LAYOUTS = ("nchw", "channels_last", "offset", "offset_channels_last", "strided", "strided_channels_last")
DTYPES = ("float32", "bfloat16", "float16", "float64")
# The last three are large enough that on a GPU each channel is cut into many chunks (one block each, merged
# afterwards), with chunk boundaries inside a run of H * W values (45 x 43 is odd: Packs of one value there).
FIXED = [(2, 3, 5, 7), (1, 1, 1, 2), (2, 1, 1, 1), (4, 16, 1, 1), (3, 32, 8, 8), (2, 64, 7, 7), (5, 8, 16, 16)]
FIXED += [(16, 3, 64, 64), (7, 5, 45, 43), (4, 64, 32, 32)]
EMPTY = [(0, 4, 5, 5), (2, 3, 0, 4), (3, 0, 2, 2)]


def _torch():
    import torch

    return torch


def _values(shape, g, *, big_mean: bool = False):
    """float64 values [N, C, H, W]: per channel its own mean and spread (one channel's mean 300 times its spread
    when big_mean: E[x^2] - mean^2 loses half of float's digits there), a few values far out in the tails."""
    torch = _torch()
    c = shape[1]
    v = torch.randn(shape, generator=g, dtype=torch.float64)
    if v.numel() == 0:
        return v
    scale = torch.rand(c, generator=g, dtype=torch.float64) * 3 + 0.2
    shift = torch.randn(c, generator=g, dtype=torch.float64) * 2
    if big_mean:
        shift[0] = 300 * scale[0]
    v = v * scale.view(1, c, 1, 1) + shift.view(1, c, 1, 1)
    flat = v.view(-1)
    if flat.numel() >= 16:
        idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 64),), generator=g)
        flat[idx] += torch.tensor([8.0, -8.0], dtype=torch.float64).repeat(len(idx))[: len(idx)] * 3
    return v


def _place(v, dtype, device: str, layout: str):
    """v (float64, [N, C, H, W]) as a tensor of `dtype` on `device` laid out as `layout`."""
    torch = _torch()
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    shape = tuple(v.shape)
    n, c, h, w = shape
    if layout == "channels_last":
        x = torch.empty(shape, dtype=dtype, device=device, memory_format=torch.channels_last)
    elif layout == "offset":  # one element into a buffer: not 16-byte aligned
        x = torch.empty(v.numel() + 1, dtype=dtype, device=device)[1:].view(shape)
    elif layout == "offset_channels_last":
        x = torch.empty(v.numel() + 1, dtype=dtype, device=device)[1:].view(n, h, w, c).permute(0, 3, 1, 2)
    elif layout == "strided":  # every other column of a tensor twice as wide
        x = torch.empty(n, c, h, 2 * w, dtype=dtype, device=device)[..., ::2]
    elif layout == "strided_channels_last":  # every other channel of a channels-last tensor
        x = torch.empty(n, 2 * c, h, w, dtype=dtype, device=device, memory_format=torch.channels_last)[:, ::2]
    else:
        x = torch.empty(shape, dtype=dtype, device=device)
    x.copy_(v.to(dtype))
    return x


def _params(c: int, dtype, device: str, g):
    """weight, bias, running_mean, running_var in the parameters' dtype (float64 for a float64 x, else float32)."""
    torch = _torch()
    pd = torch.float64 if str(dtype).endswith("float64") else torch.float32
    w = torch.randn(c, generator=g, dtype=torch.float64) + 0.5
    if c >= 3:
        w[1] = -w[1].abs()  # a negative weight flips which side the ReLU keeps
    b = torch.randn(c, generator=g, dtype=torch.float64) * 0.5
    rm = torch.randn(c, generator=g, dtype=torch.float64)
    rv = torch.rand(c, generator=g, dtype=torch.float64) + 0.5
    return [t.to(device=device, dtype=pd) for t in (w, b, rm, rv)]


def _eps_of(t) -> float:
    """The rounding of the math the op does for t's dtype: double for float64, float for the others."""
    return 2.0**-53 if str(t.dtype).endswith("float64") else 2.0**-24


def _stats(x):
    """float64 mean, biased var, max |x| per channel of x [N, C, H, W]."""
    xd = x.detach().double().cpu()
    return xd.mean((0, 2, 3)), xd.var((0, 2, 3), unbiased=False), xd.abs().amax((0, 2, 3))


def _within(got, want, bound, what: str) -> None:
    """|got - want| <= bound elementwise (all float64 on the CPU), or a Fail naming the first element off."""
    got = got.detach().double().cpu()
    err = (got - want).abs()
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise Fail(
            f"{what} differs from the float64 reference at {int(bad.sum())} of {bad.numel()} elements; the first "
            f"at {list(i)}: {float(got[i])} where {float(want[i])} is right (allowed: {float(bound[i]):.3g})"
        )


def _forward_reference(x, w, b, eps: float):
    torch = _torch()
    mean, var, amax = _stats(x)
    wd, bd = w.detach().double().cpu(), b.detach().double().cpu()
    rstd = 1 / torch.sqrt(var + eps)
    xhat = (x.detach().double().cpu() - mean.view(1, -1, 1, 1)) * rstd.view(1, -1, 1, 1)
    y = torch.relu(xhat * wd.view(1, -1, 1, 1) + bd.view(1, -1, 1, 1))
    return y, mean, var, rstd, amax, xhat


def _check_forward_outputs(x, w, b, eps, y, mean, rstd, math_eps: float) -> None:
    """y, mean and rstd against the float64 reference: the output dtype's tolerance plus float math's own error
    (16 roundings of the channel's largest |x| in the mean, relative to the spread in rstd)."""
    torch = _torch()
    want, wmean, wvar, wrstd, amax, xhat = _forward_reference(x, w, b, eps)
    spread = torch.sqrt(wvar + eps)
    rel = amax / spread  # x - mean is computed to within eps * amax: relative to the spread, this
    tol = TOLERANCES[str(y.dtype)]
    wabs = w.detach().double().cpu().abs().view(1, -1, 1, 1)
    extra = 16 * math_eps * wabs * rel.view(1, -1, 1, 1) * (1 + xhat.abs())
    _within(y, want, tol["rtol"] * want.abs() + tol["atol"] + extra, "y")
    ptol = TOLERANCES[str(mean.dtype)]
    _within(mean, wmean, ptol["atol"] + ptol["rtol"] * wmean.abs() + 16 * math_eps * amax, "mean")
    _within(rstd, wrstd, (ptol["rtol"] + 16 * math_eps * rel) * wrstd + ptol["atol"], "rstd")


def _call(x, w, b, rm, rv, momentum: float, eps: float):
    torch = _torch()
    return torch.ops.course.batchnorm_relu(x, w, b, rm, rv, float(momentum), float(eps))


def _shapes(g, count: int = 4):
    torch = _torch()
    shapes = list(FIXED)
    for _ in range(count):
        n, c = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(1, 80, (1,), generator=g))
        h, w = int(torch.randint(1, 20, (1,), generator=g)), int(torch.randint(1, 20, (1,), generator=g))
        if n * h * w == 1:
            n = 2
        shapes.append((n, c, h, w))
    return shapes


def _fmt(layout: str):
    """The memory format the op's y must have for an x of `layout`: channels-last for a channels-last x, else
    contiguous (a strided x is copied to NCHW)."""
    torch = _torch()
    return torch.channels_last if layout in ("channels_last", "offset_channels_last") else torch.contiguous_format


# ------------------------------------------------------------------------------------------------
# The checks
# ------------------------------------------------------------------------------------------------


def check_forward(ctx) -> str:
    """y, mean and rstd against the float64 reference on hidden cases: odd and tiny shapes (N = 1, C = 1,
    H = W = 1), every layout (NCHW, channels-last, unaligned, strided), every dtype, every device; y in x's memory
    format; an empty batch (y empty, the running statistics unchanged, as native); a channel whose mean is 300
    times its spread; and an input reused with new values (an op that caches its statistics fails it)."""
    torch = _torch()
    g = ctx.generator("forward")
    n = 0
    for device in ctx.devices:
        for i, shape in enumerate(_shapes(g)):
            for j, dtype in enumerate(DTYPES):
                layout = LAYOUTS[(i + j) % len(LAYOUTS)]
                momentum, eps = (0.1, 1e-5) if (i + j) % 2 else (0.3, 1e-3)
                ctx.case(f"x of shape {list(shape)}, {dtype}, {layout}, on {device}")
                x = _place(_values(shape, g, big_mean=dtype in ("float32", "float64")), dtype, device, layout)
                w, b, rm, rv = _params(shape[1], dtype, device, g)
                before = [t.detach().cpu().clone() for t in (x, w, b)]
                _canary(x.numel(), x.dtype, device, g)
                y, mean, rstd = _call(x, w, b, rm, rv, momentum, eps)
                if tuple(y.shape) != shape or y.dtype != x.dtype or y.device != x.device:
                    raise Fail(
                        f"y is {list(y.shape)} {y.dtype} on {y.device}, expected {list(shape)} {x.dtype} on {x.device}"
                    )
                if not y.is_contiguous(memory_format=_fmt(layout)):
                    raise Fail(
                        f"y has strides {y.stride()}: for a {layout} x it must be {_fmt(layout)}, as x is laid out"
                    )
                for name, t in (("mean", mean), ("rstd", rstd)):
                    if tuple(t.shape) != (shape[1],) or t.dtype != w.dtype:
                        raise Fail(f"{name} is {list(t.shape)} {t.dtype}, expected [{shape[1]}] {w.dtype}")
                _check_forward_outputs(before[0], before[1], before[2], eps, y, mean, rstd, _eps_of(x))
                n += 1
        for shape in EMPTY:
            ctx.case(f"an empty batch, x of shape {list(shape)}, on {device}")
            x = torch.empty(shape, device=device)
            w, b, rm, rv = _params(shape[1], "float32", device, g)
            rm0, rv0 = rm.clone(), rv.clone()
            y, mean, rstd = _call(x, w, b, rm, rv, 0.1, 1e-5)
            if tuple(y.shape) != shape or tuple(mean.shape) != (shape[1],):
                raise Fail(f"y is {list(y.shape)} and mean {list(mean.shape)}: expected {list(shape)} and [{shape[1]}]")
            if not (torch.equal(rm, rm0) and torch.equal(rv, rv0)):
                raise Fail("an empty batch changed the running statistics: native leaves them as they were")
            n += 1
        ctx.case(f"one x used twice, its values changed between the calls, on {device}")
        x = _place(_values((4, 6, 5, 5), g), "float32", device, "nchw")
        w, b, rm, rv = _params(6, "float32", device, g)
        _call(x, w, b, rm, rv, 0.1, 1e-5)
        x.copy_(_values((4, 6, 5, 5), g).to(x.dtype) * 2 + 1)
        y, mean, rstd = _call(x, w, b, rm, rv, 0.1, 1e-5)
        _check_forward_outputs(x.cpu(), w.cpu(), b.cpu(), 1e-5, y, mean, rstd, _eps_of(x))
    return (
        f"{n} cases ({len(DTYPES)} dtypes, {len(LAYOUTS)} layouts, empty batches, on {' and '.join(ctx.devices)}) "
        "and a reused input"
    )


def check_inputs_unchanged(ctx) -> str:
    """Forward leaves x, weight and bias bit for bit as they were (it writes only the running statistics);
    backward leaves all of its inputs so."""
    torch = _torch()
    g = ctx.generator("inputs_unchanged")
    for device in ctx.devices:
        for dtype in ("float32", "bfloat16"):
            for layout in ("nchw", "channels_last"):
                ctx.case(f"x [3, 16, 6, 6] {dtype} {layout} on {device}, forward and backward")
                x = _place(_values((3, 16, 6, 6), g), dtype, device, layout)
                w, b, rm, rv = _params(16, dtype, device, g)
                saved = {"x": x, "weight": w, "bias": b}
                copies = {k: v.clone() for k, v in saved.items()}
                y, mean, rstd = _call(x, w, b, rm, rv, 0.1, 1e-5)
                for name, t in saved.items():
                    if not _same_bits(t, copies[name]):
                        raise Fail(
                            f"forward changed {name}: {int((t != copies[name]).sum())} of {t.numel()} values differ"
                        )
                grad_y = _place(_values((3, 16, 6, 6), g), dtype, device, layout)
                args = {"grad_y": grad_y, "y": y, "x": x, "weight": w, "mean": mean, "rstd": rstd}
                copies = {k: v.clone() for k, v in args.items()}
                torch.ops.course.batchnorm_relu_backward(*args.values())
                for name, t in args.items():
                    if not _same_bits(t, copies[name]):
                        raise Fail(
                            f"backward changed {name}: {int((t != copies[name]).sum())} of {t.numel()} values differ"
                        )
    return "x, weight, bias (forward) and every input of backward bit for bit as they were"


def _same_bits(a, b) -> bool:
    """a and b hold the same bits (NaNs included: an unwritten output may hold some)."""
    return (
        a.detach()
        .cpu()
        .contiguous()
        .view(-1)
        .view(_torch().uint8)
        .equal(b.detach().cpu().contiguous().view(-1).view(_torch().uint8))
    )


def check_running_stats(ctx) -> str:
    """running_mean and running_var updated in place exactly once per call, as nn.BatchNorm2d does in training:
    (1 - momentum) * running + momentum * batch statistic, with the unbiased variance (var * M / (M - 1)) for
    running_var; momentum 0 and 1; two calls in a row; both layouts, on every device."""
    g = ctx.generator("running_stats")
    n = 0
    for device in ctx.devices:
        for i, (shape, dtype, layout, momentum) in enumerate(
            [
                ((4, 5, 3, 3), "float32", "nchw", 0.1),
                ((2, 12, 4, 5), "bfloat16", "channels_last", 0.37),
                ((3, 8, 2, 2), "float64", "nchw", 0.5),
                ((1, 3, 1, 4), "float32", "channels_last", 1.0),
                ((2, 6, 3, 1), "float16", "offset", 0.0),
                ((5, 16, 7, 7), "float32", "channels_last", 0.1),
                ((8, 3, 64, 64), "float32", "nchw", 0.1),
                ((4, 64, 32, 32), "bfloat16", "channels_last", 0.2),
            ]
        ):
            ctx.case(f"x of shape {list(shape)}, {dtype}, {layout}, momentum {momentum}, on {device}")
            x = _place(_values(shape, g), dtype, device, layout)
            w, b, rm, rv = _params(shape[1], dtype, device, g)
            rm0, rv0 = rm.double().cpu().clone(), rv.double().cpu().clone()
            _call(x, w, b, rm, rv, momentum, 1e-5)
            _check_running(x, rm, rv, rm0, rv0, momentum, "one call")
            n += 1
            if i % 2 == 0:
                ctx.case(f"a second call with another x of shape {list(shape)}, {dtype}, {layout}, on {device}")
                x2 = _place(_values(shape, g) * 0.5 - 1, dtype, device, layout)
                rm1, rv1 = rm.double().cpu().clone(), rv.double().cpu().clone()
                _call(x2, w, b, rm, rv, momentum, 1e-5)
                _check_running(x2, rm, rv, rm1, rv1, momentum, "the second call")
                n += 1
    return f"{n} updates (momentum 0, 0.1, 0.37, 0.5, 1; two calls in a row) as nn.BatchNorm2d's"


def _check_running(x, rm, rv, rm0, rv0, momentum: float, when: str) -> None:
    mean, var, amax = _stats(x)
    m = x.numel() // x.shape[1]
    unbiased = var * m / (m - 1)
    want_m = (1 - momentum) * rm0 + momentum * mean
    want_v = (1 - momentum) * rv0 + momentum * unbiased
    tol = TOLERANCES[str(rm.dtype)]
    eps = _eps_of(x)
    bound_m = tol["rtol"] * want_m.abs() + tol["atol"] + 16 * eps * amax
    bound_v = tol["rtol"] * want_v.abs() + tol["atol"] + 32 * eps * amax * (amax + mean.abs())
    got_v = rv.double().cpu()
    if not ((got_v - want_v).abs() <= bound_v).all():
        biased = (1 - momentum) * rv0 + momentum * var
        twice = (1 - momentum) * want_v + momentum * unbiased
        if ((got_v - biased).abs() <= bound_v).all() and momentum > 0:
            raise Fail(
                f"{when}: running_var is updated with the biased variance; nn.BatchNorm2d uses the unbiased one, "
                f"var * M / (M - 1) (M = {m} values per channel)"
            )
        if ((got_v - twice).abs() <= bound_v).all() and 0 < momentum < 1:
            raise Fail(f"{when}: running_var is updated twice per call")
        if ((got_v - rv0).abs() <= bound_v).all() and momentum > 0:
            raise Fail(f"{when}: running_var is not updated (it must change in place)")
    _within(rm, want_m, bound_m, f"{when}: running_mean")
    _within(rv, want_v, bound_v, f"{when}: running_var")


def _backward_reference(grad_y, y, x, w, eps: float):
    """grad_x, grad_weight, grad_bias in float64, the ReLU's mask from the op's own y; and the sizes of the terms,
    for the bound on float math's error."""
    torch = _torch()
    _, mean, var, rstd, amax, xhat = _forward_reference(x, w, torch.zeros_like(w), eps)
    gy = grad_y.detach().double().cpu()
    g = torch.where(y.detach().double().cpu() > 0, gy, torch.zeros_like(gy))
    m = x.numel() // x.shape[1]
    gb = g.sum((0, 2, 3))
    gw = (g * xhat).sum((0, 2, 3))
    k = (w.detach().double().cpu() * rstd).view(1, -1, 1, 1)
    gx = k * (g - gb.view(1, -1, 1, 1) / m - xhat * gw.view(1, -1, 1, 1) / m)
    rel = (amax / torch.sqrt(var + eps)).view(1, -1, 1, 1)
    s1 = g.abs().sum((0, 2, 3)).view(1, -1, 1, 1)
    s2 = (g * xhat).abs().sum((0, 2, 3)).view(1, -1, 1, 1)
    terms = k.abs() * (g.abs() + s1 / m + (xhat.abs() + rel * (1 + xhat.abs())) * s2 / m)
    gw_terms = s2.view(-1) + (rel.view(1, -1, 1, 1) * (1 + xhat.abs()) * g.abs()).sum((0, 2, 3))
    return gx, gw, gb, terms, gw_terms, s1.view(-1)


def _check_grads(grads, grad_y, y, x, w, eps: float) -> None:
    gx, gw, gb = grads
    want_x, want_w, want_b, terms, gw_terms, s1 = _backward_reference(grad_y, y, x, w, eps)
    meps = _eps_of(x)
    tol = TOLERANCES[str(gx.dtype)]
    _within(gx, want_x, tol["rtol"] * want_x.abs() + tol["atol"] + 32 * meps * terms, "grad_x")
    ptol = TOLERANCES[str(gw.dtype)]
    _within(gw, want_w, ptol["rtol"] * want_w.abs() + ptol["atol"] + 64 * meps * gw_terms, "grad_weight")
    _within(gb, want_b, ptol["rtol"] * want_b.abs() + ptol["atol"] + 64 * meps * s1, "grad_bias")


def check_backward(ctx) -> str:
    """gradcheck in float64 (NCHW and channels-last, x, weight and bias), then each dtype's gradients through
    autograd against the float64 formula (the ReLU's mask from the op's y), with zeros and a non-contiguous
    grad_y among the cases; the backward op's outputs in x's layout."""
    torch = _torch()
    from torch.autograd.gradcheck import GradcheckError  # (torch.autograd.gradcheck is the function)

    g = ctx.generator("backward")
    op = torch.ops.course.batchnorm_relu
    n = 0
    for device in ctx.devices:
        for shape, layout in (((2, 3, 4, 5), "nchw"), ((3, 4, 3, 3), "channels_last"), ((4, 1, 2, 3), "nchw")):
            ctx.case(f"gradcheck, x of shape {list(shape)}, float64, {layout}, on {device}")
            x = _place(_values(shape, g), "float64", device, layout).requires_grad_()
            w, b, rm, rv = _params(shape[1], "float64", device, g)
            w.requires_grad_(), b.requires_grad_()

            def fn(x, w, b, rm=rm, rv=rv):
                return op(x, w, b, rm, rv, 0.1, 1e-5)[0]

            try:
                torch.autograd.gradcheck(fn, (x, w, b))
            except GradcheckError as e:
                raise Fail("gradcheck: " + "\n".join(str(e).strip().splitlines()[:8])) from None
            except (RuntimeError, NotImplementedError) as e:
                raise Fail(
                    f"gradcheck could not differentiate the op: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                ) from None
            n += 1
        for i, shape in enumerate(
            [(2, 3, 5, 7), (1, 8, 4, 4), (4, 16, 6, 6), (2, 5, 1, 3), (6, 3, 64, 64), (4, 64, 32, 32)]
        ):
            for j, dtype in enumerate(DTYPES):
                layout = ("nchw", "channels_last", "offset", "strided")[(i + j) % 4]
                ctx.case(f"backward, x of shape {list(shape)}, {dtype}, {layout}, on {device}")
                x = _place(_values(shape, g), dtype, device, layout).requires_grad_()
                w, b, rm, rv = _params(shape[1], dtype, device, g)
                w.requires_grad_(), b.requires_grad_()
                gyv = _values(shape, g)
                gyv[gyv.abs() < 0.5] = 0  # some gradients exactly zero
                grad_y = _place(gyv, dtype, device, ("nchw", "strided", "channels_last")[i % 3])
                before = [t.detach().cpu().clone() for t in (x, w)]
                y, mean, rstd = op(x, w, b, rm, rv, 0.1, 1e-5)
                if not y.requires_grad:
                    raise Fail("y does not require grad: register the autograd formula (the op's Autograd kernel)")
                if mean.requires_grad or rstd.requires_grad:
                    raise Fail("mean and rstd require grad: they are saved statistics, not differentiable outputs")
                _canary(x.numel(), x.dtype, device, g)
                try:
                    y.backward(grad_y)
                except (RuntimeError, NotImplementedError) as e:
                    raise Fail(f"backward: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
                if x.grad is None or w.grad is None or b.grad is None:
                    raise Fail(
                        "backward gives no gradient for "
                        + ", ".join(k for k, t in (("x", x), ("weight", w), ("bias", b)) if t.grad is None)
                    )
                _check_grads((x.grad, w.grad, b.grad), grad_y.cpu(), y.detach().cpu(), before[0], before[1], 1e-5)
                n += 1
        ctx.case(f"the backward op's grad_x for a channels-last x is channels-last, on {device}")
        x = _place(_values((2, 8, 3, 3), g), "float32", device, "channels_last")
        w, b, rm, rv = _params(8, "float32", device, g)
        y, mean, rstd = _call(x, w, b, rm, rv, 0.1, 1e-5)
        gx, gw, gb = torch.ops.course.batchnorm_relu_backward(torch.ones_like(y), y, x, w, mean, rstd)
        if not gx.is_contiguous(memory_format=torch.channels_last):
            raise Fail(f"grad_x has strides {gx.stride()} for a channels-last x: it must be channels-last too")
    return (
        f"gradcheck in float64 and {n} gradient cases ({len(DTYPES)} dtypes, 4 layouts) on {' and '.join(ctx.devices)}"
    )


def check_errors(ctx) -> str:
    """Bad input gets an error that names the argument (a Python exception, never a crash or a result): a 3-D x,
    an integer x, one value per channel (native refuses it in training), parameters of the wrong shape or dtype,
    a non-contiguous running statistic (written in place), and the backward op's arguments."""

    torch = _torch()
    fwd, bwd = torch.ops.course.batchnorm_relu, torch.ops.course.batchnorm_relu_backward

    def vec(c, d, dtype=torch.float32):
        return torch.ones(c, device=d, dtype=dtype)

    def call(x, w=None, b=None, rm=None, rv=None):
        c = x.shape[1] if x.dim() > 1 else 3
        d = x.device
        return fwd(
            x,
            vec(c, d) if w is None else w,
            vec(c, d) if b is None else b,
            vec(c, d) if rm is None else rm,
            vec(c, d) if rv is None else rv,
            0.1,
            1e-5,
        )

    def good(d):
        return torch.randn(2, 3, 4, 4, device=d)

    def back(d, **change):
        x = good(d)
        args = dict(
            grad_y=torch.randn_like(x), y=torch.rand_like(x), x=x, weight=vec(3, d), mean=vec(3, d), rstd=vec(3, d)
        )
        args.update({k: v(d) for k, v in change.items()})
        return bwd(*args.values())

    cases = [
        ("x 3-D, [2, 3, 4]", "x", lambda d: call(torch.randn(2, 3, 4, device=d))),
        ("x of dtype int32", "x", lambda d: call(torch.ones(2, 3, 4, 4, dtype=torch.int32, device=d))),
        ("x with one value per channel, [1, 3, 1, 1]", "x", lambda d: call(torch.randn(1, 3, 1, 1, device=d))),
        ("weight of shape [4] for C = 3", "weight", lambda d: call(good(d), w=vec(4, d))),
        ("weight float16 beside a float32 x", "weight", lambda d: call(good(d), w=vec(3, d, torch.float16))),
        ("bias of shape [3, 1]", "bias", lambda d: call(good(d), b=torch.ones(3, 1, device=d))),
        ("running_mean of shape [2]", "running_mean", lambda d: call(good(d), rm=vec(2, d))),
        ("running_var float64 beside a float32 x", "running_var", lambda d: call(good(d), rv=vec(3, d, torch.float64))),
        ("running_mean not contiguous", "running_mean", lambda d: call(good(d), rm=vec(6, d)[::2])),
        (
            "backward: grad_y of shape [2, 3, 4, 5]",
            "grad_y",
            lambda d: back(d, grad_y=lambda d: torch.randn(2, 3, 4, 5, device=d)),
        ),
        (
            "backward: y float64",
            "y",
            lambda d: back(d, y=lambda d: torch.rand(2, 3, 4, 4, device=d, dtype=torch.float64)),
        ),
        ("backward: mean of shape [4]", "mean", lambda d: back(d, mean=lambda d: vec(4, d))),
        ("backward: rstd of dtype bfloat16", "rstd", lambda d: back(d, rstd=lambda d: vec(3, d, torch.bfloat16))),
    ]
    if "cuda" in ctx.devices:
        cases.append(("weight on the CPU, x on the GPU", "weight", lambda d: call(good("cuda"), w=vec(3, "cpu"))))
        cases.append(
            (
                "backward: grad_y on the CPU, x on the GPU",
                "grad_y",
                lambda d: back("cuda", grad_y=lambda _: torch.randn(2, 3, 4, 4)),
            )
        )
    n = 0
    for device in ctx.devices:
        for what, name, fn in cases:
            ctx.case(f"{what}, on {device}")
            grade.expect_error(what, name, lambda: fn(device), device)
            n += 1
    return f"{n} bad inputs, each an error naming the argument"


def _fake_matches(op_name: str, args, device: str) -> None:
    """Every output of the fake kernel has the real one's shape, dtype and strides (opcheck compares shapes and
    dtypes, not strides, and torch.compile plans the memory of what follows from the fake's)."""
    torch = _torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = getattr(torch.ops.course, op_name)
    ins = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    real = op(*ins)
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in ins]
    with mode:
        fake = op(*fakes)
    for i, (r, f) in enumerate(zip(real, fake)):
        for what, rv, fv in (
            ("shape", tuple(r.shape), tuple(f.shape)),
            ("strides", r.stride(), f.stride()),
            ("dtype", r.dtype, f.dtype),
        ):
            if rv != fv:
                raise Fail(
                    f"course::{op_name}'s fake kernel returns output {i} with {what} {fv}, the kernel {rv} (on {device}): "
                    "torch.compile plans the memory of what follows from the fake's"
                )


def check_opcheck(ctx) -> str:
    """torch.library.opcheck on both ops (the schema's mutations match what the kernel writes, the fake kernels
    match the real ones, autograd is registered, the op traces with dynamic shapes), and every fake output's
    strides (a channels-last x's y is channels-last)."""
    torch = _torch()
    g = ctx.generator("opcheck")
    n = 0
    for device in ctx.devices:
        samples = []
        for shape, dtype, layout, grad in (
            ((2, 3, 4, 5), "float32", "nchw", False),
            ((3, 8, 3, 3), "float32", "channels_last", True),
            ((2, 16, 2, 4), "bfloat16", "channels_last", False),
            ((2, 4, 3, 3), "float32", "strided", False),
        ):
            x = _place(_values(shape, g), dtype, device, layout).requires_grad_(grad)
            w, b, rm, rv = _params(shape[1], dtype, device, g)
            samples.append(
                (
                    "batchnorm_relu",
                    (x, w.requires_grad_(grad), b.requires_grad_(grad), rm, rv, 0.1, 1e-5),
                    f"{list(shape)} {dtype} {layout}",
                )
            )
        x = _place(_values((2, 6, 3, 3), g), "float32", device, "channels_last")
        w, b, rm, rv = _params(6, "float32", device, g)
        y, mean, rstd = _call(x, w, b, rm, rv, 0.1, 1e-5)
        gy = _place(_values((2, 6, 3, 3), g), "float32", device, "channels_last")
        samples.append(("batchnorm_relu_backward", (gy, y, x, w, mean, rstd), "[2, 6, 3, 3] float32 channels_last"))
        for name, args, desc in samples:
            ctx.case(f"opcheck course::{name}, x {desc}, on {device}")
            try:
                torch.library.opcheck(getattr(torch.ops.course, name), args)
            except Exception as e:  # noqa: BLE001  (OpCheckError, or what the op raised inside it)
                text = str(e).replace(" (scroll up for stack trace)", "")
                raise Fail("opcheck: " + "\n".join(text.strip().splitlines()[:6])) from None
            _fake_matches(name, args, device)
            n += 1
    return f"{n} samples: schema and its mutations, fake kernels (and their strides), autograd, dynamic shapes"


def check_compile(ctx) -> str:
    """torch.compile(fullgraph=True) of a function that uses the op, forward and backward, at two shapes and both
    layouts: the eager values, gradients and running statistics (the compiled graph writes them back). On the CPU
    the tracing only (backend="aot_eager"); on a GPU the full compile."""
    torch = _torch()
    g = ctx.generator("compile")
    for device in ctx.devices:
        backend = "inductor" if device == "cuda" else "aot_eager"

        def block(a, w, b, rm, rv):
            y = torch.ops.course.batchnorm_relu(a * 2 + 1, w, b, rm, rv, 0.1, 1e-5)[0]
            return (y * y).sum()

        torch._dynamo.reset()
        compiled = torch.compile(block, fullgraph=True, backend=backend)
        for shape, layout in (((4, 6, 5, 5), "nchw"), ((3, 16, 4, 4), "channels_last")):
            ctx.case(f"torch.compile(fullgraph=True, backend={backend!r}), x {list(shape)} {layout}, on {device}")
            a = _place(_values(shape, g), "float32", device, layout).requires_grad_()
            w, b, rm, rv = _params(shape[1], "float32", device, g)
            w.requires_grad_(), b.requires_grad_()
            rm2, rv2 = rm.clone(), rv.clone()
            try:
                got = compiled(a, w, b, rm, rv)
                got.backward()
            except Exception as e:  # noqa: BLE001  (a graph break or a trace error: its first lines say which)
                raise Fail(
                    f"torch.compile: {type(e).__name__}: " + "\n".join(str(e).strip().splitlines()[:5])
                ) from None
            grads = [t.grad.clone() for t in (a, w, b)]
            for t in (a, w, b):
                t.grad = None
            want = block(a, w, b, rm2, rv2)
            want.backward()
            try:
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                for name, gt, t in zip(("x", "weight", "bias"), grads, (a, w, b)):
                    torch.testing.assert_close(
                        gt, t.grad, rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"grad of {name}: {m}"
                    )
                torch.testing.assert_close(rm, rm2, rtol=1e-5, atol=1e-6, msg=lambda m: f"running_mean: {m}")
                torch.testing.assert_close(rv, rv2, rtol=1e-5, atol=1e-6, msg=lambda m: f"running_var: {m}")
            except AssertionError as e:
                raise Fail("compiled and eager differ: " + str(e).strip().splitlines()[0]) from None
    return "fullgraph, forward and backward, both layouts: the eager values, gradients and running statistics"


def check_fold(ctx) -> str:
    """fold_conv_bn(conv, bn) against torch.nn.utils.fusion.fuse_conv_bn_eval (weight and bias) and against
    bn(conv(x)) in eval mode on random inputs: with and without conv bias, groups, strides, an affine-free bn;
    float64 and float32; conv and bn left as they were."""
    import copy

    torch = _torch()
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    from helpers import capstone

    side = capstone.python_side(ctx.folder, name=NAME)
    fold = getattr(side, "fold_conv_bn", None)
    if not callable(fold):
        raise Fail("batchnorm_relu.py has no fold_conv_bn(conv, bn) function")
    g = ctx.generator("fold")
    n = 0
    for dtype in (torch.float64, torch.float32):
        for i, (cin, cout, k, bias, groups, stride, affine) in enumerate(
            [
                (3, 8, 3, True, 1, 1, True),
                (4, 6, 1, False, 2, 2, True),
                (6, 6, 3, True, 3, 1, False),
                (2, 5, 5, False, 1, 2, True),
            ]
        ):
            ctx.case(
                f"conv {cin}->{cout} k{k} bias={bias} groups={groups} stride={stride}, bn affine={affine}, {dtype}"
            )
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
            conv = (
                torch.nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=bias, groups=groups).to(dtype).eval()
            )
            bn = torch.nn.BatchNorm2d(cout, eps=(1e-5, 1e-3)[i % 2], affine=affine).to(dtype).eval()
            with torch.no_grad():
                bn.running_mean.copy_(torch.randn(cout, generator=g, dtype=dtype))
                bn.running_var.copy_(torch.rand(cout, generator=g, dtype=dtype) * 2 + 0.1)
                if affine:
                    bn.weight.copy_(torch.randn(cout, generator=g, dtype=dtype))
                    bn.bias.copy_(torch.randn(cout, generator=g, dtype=dtype))
            conv0, bn0 = copy.deepcopy(conv), copy.deepcopy(bn)
            try:
                fused = fold(conv, bn)
            except NotImplementedError as e:
                raise Fail(f"fold_conv_bn: NotImplementedError: {e}") from None
            if not isinstance(fused, torch.nn.Conv2d) or fused.bias is None:
                raise Fail(
                    f"fold_conv_bn returned {type(fused).__name__} (bias {getattr(fused, 'bias', None) is not None}): expected an nn.Conv2d with a bias"
                )
            for name, (a, b) in {
                "conv.weight": (conv.weight, conv0.weight),
                "conv.bias": (conv.bias, conv0.bias),
                "bn.running_mean": (bn.running_mean, bn0.running_mean),
                "bn.running_var": (bn.running_var, bn0.running_var),
            }.items():
                if a is not None and not torch.equal(a, b):
                    raise Fail(f"fold_conv_bn changed {name}: fold into a new convolution and leave conv and bn alone")
            tol = dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-5)
            ref = fuse_conv_bn_eval(conv0, bn0)
            x = torch.randn(2, cin, 9, 8, generator=g, dtype=dtype)
            try:
                torch.testing.assert_close(
                    fused.weight.detach(), ref.weight.detach(), **tol, msg=lambda m: f"weight vs fuse_conv_bn_eval: {m}"
                )
                torch.testing.assert_close(
                    fused.bias.detach(), ref.bias.detach(), **tol, msg=lambda m: f"bias vs fuse_conv_bn_eval: {m}"
                )
                with torch.no_grad():
                    torch.testing.assert_close(
                        fused(x), bn0(conv0(x)), **tol, msg=lambda m: f"fused(x) vs bn(conv(x)): {m}"
                    )
            except AssertionError as e:
                raise Fail("fold_conv_bn: " + "\n".join(str(e).strip().splitlines()[:4])) from None
            n += 1
    return f"{n} folds: fuse_conv_bn_eval's weight and bias, and bn(conv(x)) in eval mode"


def check_stream(ctx) -> str:
    """The op runs on PyTorch's current stream: on a side stream, x is written after a long sleep and the op called
    right after (forward and backward; a warm-up call first, since a kernel's first launch loads its module and
    synchronizes the device, which would hide a launch on the legacy stream)."""
    torch = _torch()
    if "cuda" not in ctx.devices:
        raise Skip("no GPU")
    g = ctx.generator("stream")
    shape = (8, 64, 28, 28)
    side = torch.cuda.Stream()
    for layout in ("nchw", "channels_last"):
        src = _place(_values(shape, g), "float32", "cuda", layout)
        gy_src = _place(_values(shape, g), "float32", "cuda", layout)
        w, b, rm, rv = _params(shape[1], "float32", "cuda", g)
        y0, mean0, rstd0 = _call(src, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)  # the warm-up, and the reference's y
        torch.ops.course.batchnorm_relu_backward(gy_src, y0, src, w, mean0, rstd0)
        torch.cuda.synchronize()
        for what in ("forward", "backward"):
            ctx.case(f"{what} on a side stream after torch.cuda._sleep, x {list(shape)} {layout}")
            x = torch.zeros_like(src)
            gy = torch.zeros_like(gy_src)
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                torch.cuda._sleep(50_000_000)  # tens of milliseconds: far longer than a launch
                x.copy_(src)
                gy.copy_(gy_src)
                if what == "forward":
                    out = _call(x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
                else:
                    out = torch.ops.course.batchnorm_relu_backward(gy, y0, x, w, mean0, rstd0)
            side.synchronize()
            torch.cuda.synchronize()
            if what == "forward":
                _check_forward_outputs(src.cpu(), w.cpu(), b.cpu(), 1e-5, out[0], out[1], out[2], _eps_of(src))
            else:
                _check_grads(out, gy_src.cpu(), y0.cpu(), src.cpu(), w.cpu(), 1e-5)
    return "forward and backward ordered after earlier work on the current stream, both layouts"


def check_speed(ctx) -> str:
    """Forward and forward+backward at ResNet-50 shapes (N = 32: C = 256 at 56 x 56, and C = 64 at 112 x 112), NCHW
    and channels-last, bfloat16 and float32, on fresh inputs for every timed call, against native PyTorch
    (F.batch_norm(training=True) then F.relu) and torch.compile of it, as % of a copy of the bytes the op must move
    at least: forward reads x and writes y (2 * numel values), forward+backward adds reading grad_y, y and x and
    writing grad_x (6 * numel in all). A time well below the copy's (IMPOSSIBLE_PCT) is impossible and fails."""
    torch = _torch()
    import torch.nn.functional as F

    from helpers import bench

    if "cuda" not in ctx.devices:
        raise Skip("no GPU: timings need one")

    def native(x, w, b, rm, rv):
        return F.relu(F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5))

    def ours(x, w, b, rm, rv):
        return torch.ops.course.batchnorm_relu(x, w, b, rm, rv, 0.1, 1e-5)[0]

    lines, impossible = [], []
    runs = [((32, 256, 56, 56), dt, fmt) for dt in (torch.bfloat16, torch.float32) for fmt in ("nchw", "channels_last")]
    runs += [((32, 64, 112, 112), torch.bfloat16, fmt) for fmt in ("nchw", "channels_last")]
    for shape, dtype, layout in runs:
        # a fresh compile per case: one function's compiled graphs share a cache of 8, and 6 cases x (inference,
        # training) would overflow it into eager for the last ones
        torch._dynamo.reset()
        compiled = torch.compile(native)
        memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        c = shape[1]
        xs = [torch.randn(shape, dtype=dtype, device="cuda").contiguous(memory_format=memory_format) for _ in range(3)]
        gys = [torch.randn(shape, dtype=dtype, device="cuda").contiguous(memory_format=memory_format) for _ in range(3)]
        w = torch.rand(c, device="cuda") + 0.5
        b = torch.randn(c, device="cuda")
        rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
        wg, bg = w.clone().requires_grad_(), b.clone().requires_grad_()
        k = [0]

        def fresh():  # each timed call takes the next of 3 inputs: a result cached by input cannot be replayed
            k[0] = (k[0] + 1) % 3
            return k[0]

        def fwd(fn):
            return lambda: fn(xs[fresh()], w, b, rm, rv)

        def fwd_bwd(fn):
            def run():
                i = fresh()
                x = xs[i].detach().requires_grad_()
                fn(x, wg, bg, rm, rv).backward(gys[i])

            return run

        numel, esize = xs[0].numel(), xs[0].element_size()
        for what, nbytes, wrap in (
            ("forward", 2 * numel * esize, fwd),
            ("forward+backward", 6 * numel * esize, fwd_bwd),
        ):
            label = f"{what:<16} {str(dtype).replace('torch.', ''):<8} {layout:<13} {list(shape)}"
            ctx.case(label)
            fns = {"yours": wrap(ours), "native": wrap(native), "torch.compile": wrap(compiled)}
            res = {r["impl"]: r for r in bench.compare(fns, nbytes=nbytes, device="cuda")}
            mine = res["yours"]
            lines.append(
                f"{label} {mine['ms']:.3f} ms, {mine['pct_copy']:.0f} % of a copy; "
                + ", ".join(f"{name} {r['ms'] / mine['ms']:.2f}x" for name, r in res.items() if name != "yours")
            )
            if mine["pct_copy"] > IMPOSSIBLE_PCT:
                impossible.append(f"{label}: {mine['pct_copy']:.0f} % of a copy of the same bytes")
    text = "times as ratios: theirs / yours (above 1: yours is faster)\n" + "\n".join(lines)
    if impossible:
        raise Fail(
            "impossible: faster than a copy of the bytes the op must move (is work skipped, cached, or on another "
            "stream?):\n" + "\n".join(impossible) + "\n" + text
        )
    return text


# ------------------------------------------------------------------------------------------------
# The corpus: wrong and cheating answers, each the solution with a few edits, and the check that rejects it
# ------------------------------------------------------------------------------------------------

E = grade_corpus.E
_FINALIZE_CPU = "    bn_update_running(running_mean[c], running_var[c], s, momentum);\n  }\n}"
_STATS_NCHW_CPU = "  if (!channels_last) {\n    at::parallel_for(0, C, grain(M),"
CORPUS = [
    E(
        "running_var_biased",
        "running_var updated with the biased variance m2 / n (nn.BatchNorm2d keeps the unbiased m2 / (n - 1))",
        "running_stats",
        "cpu",
        ("batchnorm_relu_math.h", "momentum * (s.m2 / (s.n - A(1)))", "momentum * (s.m2 / s.n)"),
    ),
    E(
        "running_stats_not_updated",
        "the running statistics never written: the CPU finalize computes rstd and stops",
        "running_stats",
        "cpu",
        ("batchnorm_relu.cpu.cpp", _FINALIZE_CPU, "  }\n}"),
    ),
    E(
        "running_stats_updated_twice",
        "the running statistics updated twice per call (the update written in the loop and again after it)",
        "running_stats",
        "cpu",
        (
            "batchnorm_relu.cpu.cpp",
            _FINALIZE_CPU,
            "    bn_update_running(running_mean[c], running_var[c], s, momentum);\n"
            "    bn_update_running(running_mean[c], running_var[c], s, momentum);\n  }\n}",
        ),
    ),
    E(
        "normalized_with_unbiased_var",
        "y normalized with the unbiased variance m2 / (n - 1), where training mode uses the biased m2 / n",
        "forward",
        "cpu",
        (
            "batchnorm_relu_math.h",
            "return A(1) / bn_sqrt(s.m2 / s.n + eps);",
            "return A(1) / bn_sqrt(s.m2 / (s.n - A(1)) + eps);",
        ),
    ),
    E(
        "variance_from_the_sum_of_squares",
        "var = E[x^2] - mean^2 from a sum and a sum of squares in float: a channel whose mean is large beside its "
        "spread loses its variance",
        "forward",
        "cpu",
        (
            "batchnorm_relu.cpu.cpp",
            "  for (int64_t j0 = 0; j0 < len; j0 += kBlock) {\n    const int64_t end = std::min(len, j0 + kBlock);\n"
            "    A mean[kLanes] = {}, m2[kLanes] = {};",
            "  A sum = 0, sum2 = 0;\n  for (int64_t j = 0; j < len; ++j) sum += A(p[j]), sum2 += A(p[j]) * A(p[j]);\n"
            "  total = Welford<A>{A(len), sum / A(len), sum2 - sum * sum / A(len)};\n"
            "  for (int64_t j0 = len; j0 < len; j0 += kBlock) {\n    const int64_t end = std::min(len, j0 + kBlock);\n"
            "    A mean[kLanes] = {}, m2[kLanes] = {};",
        ),
    ),
    E(
        "channels_last_read_as_nchw",
        "the statistics loop reads every x as NCHW: a channels-last x's channels are mixed up",
        "forward",
        "cpu",
        ("batchnorm_relu.cpp", _STATS_NCHW_CPU, _STATS_NCHW_CPU.replace("!channels_last", "true")),
    ),
    E(
        "relu_mask_from_x",
        "the ReLU's mask taken from x (x > 0) instead of from the saved y (y > 0)",
        "backward",
        "cpu",
        ("batchnorm_relu_math.h", "const A g = y > A(0) ? grad_y : A(0);", "const A g = x > A(0) ? grad_y : A(0);"),
    ),
    E(
        "backward_missing_the_mean_term",
        "grad_x without the -sum(g) / M term (the mean's own gradient forgotten)",
        "backward",
        "cpu",
        ("batchnorm_relu_math.h", "c.q = -c.k * sum_g / M;", "c.q = A(0);"),
    ),
    E(
        "fake_output_not_channels_last",
        "the fake kernel's y is always contiguous, where the kernel returns a channels-last y for a channels-last x",
        "opcheck",
        "cpu",
        (
            "batchnorm_relu.py",
            "    y = torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=_layout(x))\n    return y,",
            "    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)\n    return y,",
        ),
    ),
    E(
        "fold_drops_the_conv_bias",
        "fold_conv_bn's bias ignores the convolution's own bias: -mean * s + beta",
        "fold",
        "cpu",
        ("batchnorm_relu.py", "new_b = (b - mean) * s + beta", "new_b = -mean * s + beta"),
    ),
    E(
        "statistics_cached_by_address",
        "the statistics remembered by x's address and reused when the same tensor comes back, whatever it holds now",
        "forward",
        "cpu",
        (
            "batchnorm_relu.cpp",
            _STATS_NCHW_CPU,
            "  static const void* seen = nullptr;\n  static std::vector<A> memo_mean, memo_m2;\n"
            "  if (xp == seen && int64_t(memo_mean.size()) == C) {\n"
            "    std::copy(memo_mean.begin(), memo_mean.end(), mp);\n    std::copy(memo_m2.begin(), memo_m2.end(), m2p);\n"
            "  } else if (!channels_last) {\n    at::parallel_for(0, C, grain(M),",
        ),
        (
            "batchnorm_relu.cpp",
            "  bn_finalize_cpu(mp, m2p, M, C,",
            "  seen = xp;\n  memo_mean.assign(mp, mp + C);\n  memo_m2.assign(m2p, m2p + C);\n  bn_finalize_cpu(mp, m2p, M, C,",
        ),
        ("batchnorm_relu.cpp", "#include <tuple>\n", "#include <tuple>\n#include <vector>\n"),
    ),
    E(
        "python_kernel",
        "F.batch_norm and F.relu registered from Python as the CPU kernel, in place of the C++ one",
        "registered",
        "cpu",
        (
            "batchnorm_relu.py",
            "def register(lib: torch.library.Library) -> None:\n",
            "def _native(x, weight, bias, running_mean, running_var, momentum, eps):\n"
            "    y = torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, True, momentum, eps)\n"
            "    mean = x.double().mean((0, 2, 3)).to(weight.dtype)\n"
            "    rstd = (x.double().var((0, 2, 3), unbiased=False) + eps).rsqrt().to(weight.dtype)\n"
            "    return torch.relu(y), mean, rstd\n\n\n"
            "def register(lib: torch.library.Library) -> None:\n"
            '    lib.impl("batchnorm_relu", _native, "CPU", allow_override=True)\n',
        ),
    ),
    E(
        "cuda_one_partial_per_channel",
        "the CUDA finalize reads only the first block's partial of each channel: the other chunks' values are lost",
        "forward",
        "cuda",
        (
            "batchnorm_relu.cu",
            "s < splits; s += kFinLanes)\n      w = welford_merge(",
            "s < 1; s += kFinLanes)\n      w = welford_merge(",
        ),
    ),
    E(
        "cuda_legacy_default_stream",
        "the statistics kernel launched on the legacy default stream, not PyTorch's current one",
        "stream",
        "cuda",
        (
            "batchnorm_relu.cu",
            "launch(stats_nchw_kernel<T, V>, grid, block, 0, stream, pdl,",
            "launch(stats_nchw_kernel<T, V>, grid, block, 0, cudaStream_t(0), pdl,",
        ),
    ),
    E(
        "cuda_benchmark_shape_skipped",
        "the benchmark's shape special-cased: for N = 32, C = 256, 56 x 56 nothing is computed",
        "speed",
        "cuda",
        (
            "batchnorm_relu.cu",
            "Acc<T> eps, cudaStream_t stream) {\n  if (plan.vec > 1)\n    forward<",
            "Acc<T> eps, cudaStream_t stream) {\n  if (N == 32 && C == 256 && HW == 56 * 56) return;\n"
            "  if (plan.vec > 1)\n    forward<",
        ),
    ),
]
