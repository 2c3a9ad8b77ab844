"""The grader's spec for lesson 09's course::cross_entropy: fused softmax cross-entropy for logits [N, V] (V up to
128k and more) and int64 targets [N], as F.cross_entropy computes it (ignore_index, label_smoothing, the three
reductions), with a backward from the rows' saved lse and an in-place path that writes the gradient over the
logits in forward (what Liger-Kernel does).

Every value is checked against F.cross_entropy in float64 (the function as it was when this file loaded, before
the op's code): the loss (and lse) in forward, the gradient by float64 autograd. Gradients are compared row by
row after dividing by the row's scale (the incoming gradient over the mean's count), so a term of size eps / V is
seen even where the mean divides the gradient by thousands of rows.
"""

from __future__ import annotations

import re

import torch
from torch.autograd.gradcheck import GradcheckError

from helpers import grade, grade_corpus
from helpers.grade import IMPOSSIBLE_PCT, TOLERANCES, Fail, Skip, _canary

NAME = "cross_entropy"
SCHEMAS = {
    "course::cross_entropy": "course::cross_entropy(Tensor logits, Tensor target, int ignore_index, "
    "float label_smoothing, int reduction) -> (Tensor, Tensor)",
    "course::cross_entropy_backward": "course::cross_entropy_backward(Tensor grad_loss, Tensor logits, Tensor target, "
    "Tensor lse, int ignore_index, float label_smoothing, int reduction) -> Tensor",
    "course::cross_entropy_inplace_": "course::cross_entropy_inplace_(Tensor(a!) logits, Tensor target, "
    "int ignore_index, float label_smoothing, int reduction) -> Tensor",
    "course::cross_entropy_scale_": "course::cross_entropy_scale_(Tensor(a!) grad, Tensor grad_loss) -> ()",
}
CHECKS = [
    "build",
    "registered",
    "forward",
    "inputs_unchanged",
    "backward",
    "inplace",
    "saves_no_softmax",
    "errors",
    "opcheck",
    "compile",
    "stream",
    "memory",
    "speed",
    "integrity",
]

TASK = (
    "Fused softmax cross-entropy, course::cross_entropy: for logits [N, V] and int64 targets [N], each row's "
    "log-sum-exp in one pass (a running max and a sum of exp rescaled when the max grows, never a softmax "
    "tensor), its loss with ignore_index and label smoothing, the mean, sum or none of them; the gradient "
    "softmax - (1 - eps) onehot - eps / V from the saved lse; and the in-place path that writes that gradient "
    "over the logits in the same pass. You write the row math (cross_entropy_math.h), the CPU loops, the CUDA "
    "row kernels' bodies and the autograd formulas; the folder holds the rest."
)
LINES = 75

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
DTYPES = ("float32", "float16", "bfloat16", "float64")
IGNORE = -100
# The functions the reference is made of, as they are before the op's code loads (the child imports this file
# first): an op that replaced F.cross_entropy would change its own answer key, not this one.
_CROSS_ENTROPY = torch.nn.functional.cross_entropy
_LOGSUMEXP = torch.logsumexp
_SOFTMAX = torch.softmax


# --------------------------------------------------------------------------------------------------
# Inputs and references
# --------------------------------------------------------------------------------------------------


def _dt(dtype) -> torch.dtype:
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


def _name(dtype) -> str:
    return str(_dt(dtype)).replace("torch.", "")


# The largest logits a row gets in an "extreme" case, per dtype: 1e4 for all, and the dtype's far end where the
# loss still fits it (float16's 65504 bounds lse - x_t, so its rows span +-3e4).
EXTREME = {"float32": 1e30, "float64": 1e30, "bfloat16": 1e30, "float16": 3e4}


def _logits(n, v, dtype, device, g, *, layout="contiguous", scale=3.0, extreme_rows=0, extreme=1e4):
    """[n, v] logits ~ scale * N(0, 1), the first `extreme_rows` rows uniform in +-extreme, laid out as `layout`:
    contiguous; transposed (a view of a [v, n] tensor: unit stride along rows, not classes); padded (the first v
    columns of a [n, v + 3] tensor, as a vocabulary padded to a round size); offset (one element into a buffer:
    no row starts on a 16-byte boundary)."""
    vals = torch.randn(n, v, generator=g, dtype=torch.float64) * scale
    k = min(extreme_rows, n)
    if k and v:
        vals[:k] = (torch.rand(k, v, generator=g, dtype=torch.float64) * 2 - 1) * extreme
    dt = _dt(dtype)
    if layout == "transposed":
        x = torch.empty(v, n, dtype=dt, device=device).t()
    elif layout == "padded":
        x = torch.empty(n, v + 3, dtype=dt, device=device)[:, :v]
    elif layout == "offset":
        x = torch.empty(n * v + 1, dtype=dt, device=device)[1:].view(n, v)
    else:
        x = torch.empty(n, v, dtype=dt, device=device)
    x.copy_(vals.to(dt))
    return x


def _targets(n, v, device, g, *, ignored=0.2, ignore_index=IGNORE):
    """[n] int64 targets in [0, v), about a fraction `ignored` of them ignore_index."""
    t = torch.randint(0, v, (n,), generator=g) if v else torch.zeros(n, dtype=torch.long)
    if n:
        t[torch.rand(n, generator=g) < ignored] = ignore_index
    return t.to(device)


def reference(x, t, ignore_index=IGNORE, eps=0.0, reduction="mean"):
    """F.cross_entropy in float64: the loss everything is checked against."""
    return _CROSS_ENTROPY(
        x.detach().double().cpu(), t.cpu(), ignore_index=ignore_index, label_smoothing=eps, reduction=reduction
    )


def reference_grad(x, t, grad_loss, ignore_index=IGNORE, eps=0.0, reduction="mean"):
    """d loss / d logits in float64, by autograd through F.cross_entropy, for the incoming gradient grad_loss."""
    xd = x.detach().double().cpu().requires_grad_()
    loss = _CROSS_ENTROPY(xd, t.cpu(), ignore_index=ignore_index, label_smoothing=eps, reduction=reduction)
    loss.backward(grad_loss.detach().double().cpu())
    return xd.grad


def _close(got, want, what: str) -> None:
    """got (any dtype) against the float64 want, with got's dtype's tolerance; NaN where want is NaN (a mean of
    no rows), inf where want is inf (a masked logit's smoothing term)."""
    tol = TOLERANCES[str(got.dtype)]
    try:
        torch.testing.assert_close(got.detach().double().cpu(), want.double().cpu(), equal_nan=True, **tol)
    except AssertionError as e:
        msg = str(e).strip().splitlines()
        raise Fail(f"{what} differs from F.cross_entropy in float64 beyond {tol}:\n" + "\n".join(msg[:6])) from None


def _close_grad(got, want, x, t, grad_loss, ignore_index, reduction, what="the gradient") -> None:
    """A gradient against float64's, row by row after dividing by the row's scale s_i (|grad_loss_i|, over the
    mean's count): the softmax and one-hot terms then have their own size (1 / V and up). The bound adds the
    error float math makes on these inputs: exp(x - lse) from a float lse, whose rounding (2^-24 |lse|) and
    x - lse's become a relative error of the softmax (ex2.approx adds 2^-22)."""
    tol = TOLERANCES[str(got.dtype)]
    n = x.shape[0]
    if n == 0:
        return
    xd = x.detach().double().cpu()
    keep = t.cpu() != ignore_index
    gl = grad_loss.detach().double().cpu().abs()
    s = gl.expand(n).clone() if gl.dim() == 0 else gl.clone()
    if reduction == "mean":
        s /= max(int(keep.sum()), 1)
    s = torch.where(s > 0, s, torch.ones_like(s))[:, None]
    lse = _LOGSUMEXP(xd, 1, keepdim=True)
    p = torch.exp(xd - lse)
    math_eps = 1e-13 if got.dtype == torch.float64 else 2.0**-21
    err = (got.detach().double().cpu() - want) / s
    bound = tol["rtol"] * (want / s).abs() + tol["atol"] + math_eps * p * (1 + xd.abs() + lse.abs())
    bad = ~(err.abs() <= bound)  # NaN fails
    bad &= ~(torch.isnan(want) & torch.isnan(got.detach().double().cpu()))
    if bad.any():
        i, j = (int(v) for v in bad.nonzero()[0])
        raise Fail(
            f"{what} differs from float64 autograd at {int(bad.sum())} of {bad.numel()} elements; the first at "
            f"[{i}, {j}] (target {int(t[i])}{', ignored' if not keep[i] else ''}): {float(got[i, j]):.6g} where "
            f"{float(want[i, j]):.6g} is right (allowed: {float(bound[i, j] * s[i, 0]):.3g})"
        )


def _shape_cases(g, random_count=4):
    """(N, V): tiny, odd, empty and one-class rows, rows longer than a block's loads, then random ones (V up to
    3000, odd more often than not)."""
    shapes = [(1, 1), (3, 1), (0, 5), (4, 2), (5, 7), (2, 8), (3, 9), (7, 33), (33, 128), (2, 1151), (1, 4099)]
    for _ in range(random_count):
        n = int(torch.randint(1, 300, (1,), generator=g))
        v = int(torch.randint(1, 3000, (1,), generator=g))
        shapes.append((n, v))
    return shapes


LAYOUTS = ("contiguous", "padded", "offset", "transposed")


def _op(x, t, ignore_index=IGNORE, eps=0.0, reduction="mean"):
    return torch.ops.course.cross_entropy(x, t, ignore_index, eps, REDUCTIONS[reduction])


def _python_side(ctx):
    """The folder's cross_entropy.py, as loaded by the build check (its cross_entropy function, with autograd)."""
    import sys

    from helpers import capstone

    side = capstone.python_side(ctx.folder, name=NAME)
    sys.modules[side.__name__] = side  # torch.compile looks a traced function's module up by its name
    return side


# --------------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------------


def check_forward(ctx) -> str:
    """The loss and lse against F.cross_entropy in float64 on hidden cases: the shapes of _shape_cases, every dtype,
    the three reductions, label smoothing 0 and 0.1, a fifth of the rows ignored, four layouts, every device;
    then rows of logits at +-1e4 and at the dtype's far end, masked logits (-inf), all rows ignored (a mean of
    nothing: NaN, as native), ignore_index inside [0, V), and an input reused with new values."""
    g = ctx.generator("forward")
    n_cases = 0
    for device in ctx.devices:
        for i, (n, v) in enumerate(_shape_cases(g)):
            for k, dtype in enumerate(DTYPES):
                reduction = ("none", "mean", "sum")[(i + k) % 3]
                eps = (0.0, 0.1)[(i // 3 + k) % 2]
                layout = LAYOUTS[(i + 2 * k) % len(LAYOUTS)]
                ctx.case(
                    f"logits [{n}, {v}] {dtype} {layout}, reduction={reduction!r}, label_smoothing={eps}, on {device}"
                )
                x = _logits(n, v, dtype, device, g, layout=layout, extreme_rows=1 if n > 3 else 0)
                t = _targets(n, v, device, g)
                _one_forward(x, t, IGNORE, eps, reduction, g)
                n_cases += 1
        for dtype in DTYPES:
            for extreme in (1e4, EXTREME[dtype]):
                for eps in (0.0, 0.1):
                    ctx.case(f"logits at +-{extreme:g}, {dtype}, label_smoothing={eps}, reduction='none', on {device}")
                    x = _logits(6, 257, dtype, device, g, extreme_rows=6, extreme=extreme)
                    t = _targets(6, 257, device, g, ignored=0.0)
                    t[0] = int(x[0].float().argmax())  # a loss near 0: lse - x_t where both are huge
                    _one_forward(x, t, IGNORE, eps, "none", g)
                    n_cases += 1
            ctx.case(f"masked logits (-inf in most of each row), {dtype}, on {device}")
            x = _logits(5, 300, dtype, device, g)
            x[:, 10:] = float("-inf")
            x[4] = float("-inf")  # a row masked whole, its target ignored
            t = _targets(5, 10, device, g, ignored=0.0)
            t[4] = IGNORE
            _one_forward(x, t, IGNORE, 0.0, "none", g)
            _one_forward(x, t, IGNORE, 0.0, "mean", g)
            for reduction in REDUCTIONS:
                ctx.case(f"every row ignored, reduction={reduction!r}, {dtype}, on {device}")
                x = _logits(4, 9, dtype, device, g)
                _one_forward(x, torch.full((4,), IGNORE, device=device), IGNORE, 0.1, reduction, g)
                n_cases += 1
        ctx.case(f"ignore_index=3, a class of the logits, on {device}")
        x = _logits(40, 17, "float32", device, g)
        t = _targets(40, 17, device, g, ignored=0.0)
        t[::3] = 3
        _one_forward(x, t, 3, 0.1, "mean", g)
        ctx.case(f"one input used twice, its values changed between the calls, on {device}")
        x = _logits(64, 96, "float32", device, g)
        t = _targets(64, 96, device, g)
        _op(x, t)
        x.copy_(_logits(64, 96, "float32", device, g))
        _close(_op(x, t)[0], reference(x, t), "the loss of the second call")
        n_cases += 2
    return (
        f"{n_cases} cases ({len(DTYPES)} dtypes, 3 reductions, smoothing 0 and 0.1, ignored rows, {len(LAYOUTS)} "
        f"layouts, logits to +-1e30, on {' and '.join(ctx.devices)}) and a reused input"
    )


def _one_forward(x, t, ignore_index, eps, reduction, g) -> None:
    before = x.detach().cpu().clone()
    n = x.shape[0]
    _canary(n, x.dtype, x.device.type, g)
    loss, lse = _op(x, t, ignore_index, eps, reduction)
    want_shape = (n,) if reduction == "none" else ()
    want_lse = torch.float64 if x.dtype == torch.float64 else torch.float32
    if tuple(loss.shape) != want_shape or loss.dtype != x.dtype or loss.device != x.device:
        raise Fail(
            f"the loss is {list(loss.shape)} {loss.dtype} on {loss.device}; F.cross_entropy gives {list(want_shape)} "
            f"{x.dtype} on {x.device}"
        )
    if tuple(lse.shape) != (n,) or lse.dtype != want_lse:
        raise Fail(f"lse is {list(lse.shape)} {lse.dtype}; expected [{n}] {want_lse} (the math's dtype)")
    _close(loss, reference(before, t, ignore_index, eps, reduction), "the loss")
    if n:
        want = _LOGSUMEXP(before.double(), 1)
        try:
            torch.testing.assert_close(lse.double().cpu(), want, rtol=1e-5, atol=1e-5, equal_nan=True)
        except AssertionError as e:
            raise Fail("lse differs from logsumexp in float64:\n" + "\n".join(str(e).splitlines()[:5])) from None


def check_inputs_unchanged(ctx) -> str:
    """The non-inplace ops leave their inputs as they were, bit for bit: forward (logits, target) and backward
    (grad_loss, logits, target, lse)."""
    g = ctx.generator("inputs_unchanged")
    for device in ctx.devices:
        for dtype in ("float32", "bfloat16"):
            for reduction in ("mean", "none"):
                ctx.case(f"logits [9, 333] {dtype}, reduction={reduction!r}, forward and backward, on {device}")
                x = _logits(9, 333, dtype, device, g)
                t = _targets(9, 333, device, g)
                x0, t0 = x.clone(), t.clone()
                loss, lse = _op(x, t, IGNORE, 0.1, reduction)
                for name, a, a0 in (("logits", x, x0), ("target", t, t0)):
                    if not torch.equal(a, a0):
                        raise Fail(f"forward changed {name}: {int((a != a0).sum())} of {a.numel()} values differ")
                gl = torch.rand(loss.shape, generator=g, dtype=torch.float64).to(device=device, dtype=x.dtype)
                gl0, lse0 = gl.clone(), lse.clone()
                torch.ops.course.cross_entropy_backward(gl, x, t, lse, IGNORE, 0.1, REDUCTIONS[reduction])
                for name, a, a0 in (("grad_loss", gl, gl0), ("logits", x, x0), ("target", t, t0), ("lse", lse, lse0)):
                    if not torch.equal(a, a0):
                        raise Fail(f"backward changed {name}: {int((a != a0).sum())} of {a.numel()} values differ")
    return "logits, target, lse and grad_loss bit for bit as they were, after forward and backward"


def check_backward(ctx) -> str:
    """gradcheck in float64 (each reduction, with smoothing and an ignored row), then each dtype's gradient through
    autograd against float64 autograd of F.cross_entropy, for a random incoming gradient, on hidden shapes and
    layouts; and a mean over no rows (every target ignored): a zero gradient, as native's."""
    g = ctx.generator("backward")
    n_cases = 0
    for device in ctx.devices:
        for reduction in REDUCTIONS:
            for eps in (0.0, 0.2):
                ctx.case(f"gradcheck, logits [4, 7] float64, reduction={reduction!r}, label_smoothing={eps}, {device}")
                x = _logits(4, 7, "float64", device, g, scale=1.0).requires_grad_()
                t = torch.tensor([1, IGNORE, 6, 0], device=device)
                try:
                    torch.autograd.gradcheck(lambda a: _op(a, t, IGNORE, eps, reduction)[0], (x,))
                except GradcheckError as e:
                    raise Fail("gradcheck: " + "\n".join(str(e).strip().splitlines()[:8])) from None
                except RuntimeError as e:
                    raise Fail(f"gradcheck could not differentiate the op: {str(e).splitlines()[0]}") from None
        shapes = [(1, 1), (3, 2), (5, 37), (2, 1151)] + _shape_cases(g, random_count=2)[-2:]
        for i, (n, v) in enumerate(shapes):
            for k, dtype in enumerate(DTYPES):
                reduction = ("mean", "none", "sum")[(i + k) % 3]
                eps = (0.1, 0.0)[(i + k // 2) % 2]
                layout = LAYOUTS[(i + k) % len(LAYOUTS)]
                ctx.case(
                    f"backward, logits [{n}, {v}] {dtype} {layout}, reduction={reduction!r}, label_smoothing={eps}, "
                    f"on {device}"
                )
                x = _logits(n, v, dtype, device, g, layout=layout, extreme_rows=1 if n > 2 else 0).requires_grad_()
                t = _targets(n, v, device, g)
                _one_backward(x, t, IGNORE, eps, reduction, g)
                n_cases += 1
        ctx.case(f"backward of a mean over no rows (every target ignored), on {device}")
        x = _logits(3, 11, "float32", device, g).requires_grad_()
        t = torch.full((3,), IGNORE, device=device)
        (grad,) = torch.autograd.grad(_op(x, t, IGNORE, 0.1, "mean")[0], x)
        if grad.abs().sum() != 0 or torch.isnan(grad).any():
            raise Fail("the gradient of a mean over no rows must be 0 everywhere (every row is ignored), as native's")
    return f"gradcheck in float64 and {n_cases} cases of {len(DTYPES)} dtypes against float64, on {' and '.join(ctx.devices)}"


def _one_backward(x, t, ignore_index, eps, reduction, g) -> None:
    before = x.detach().cpu().clone()
    loss, lse = _op(x, t, ignore_index, eps, reduction)
    if not loss.requires_grad:
        raise Fail("the loss does not require grad: register the autograd formula (register_autograd)")
    gl = (torch.rand(loss.shape, generator=g, dtype=torch.float64) * 2 + 0.5).to(device=x.device, dtype=x.dtype)
    _canary(x.numel(), x.dtype, x.device.type, g)
    (grad,) = torch.autograd.grad(loss, x, gl)
    if tuple(grad.shape) != tuple(x.shape) or grad.dtype != x.dtype:
        raise Fail(f"the gradient is {list(grad.shape)} {grad.dtype}; expected {list(x.shape)} {x.dtype}")
    want = reference_grad(before, t, gl, ignore_index, eps, reduction)
    _close_grad(grad, want, before, t, gl, ignore_index, reduction)


def check_inplace(ctx) -> str:
    """course::cross_entropy_inplace_: the loss it returns is the non-inplace loss, and what it writes over the
    logits is d loss / d logits (float64 autograd's); the Python function with inplace_grad=True through autograd,
    for random incoming gradients (the backward scales the stored gradient) and for 1 (the usual scalar loss);
    logits that need no gradient are left alone; and logits that an earlier op saved for its backward make that
    backward fail loudly, not compute on the overwritten values."""
    g = ctx.generator("inplace")
    side = _python_side(ctx)
    n_cases = 0
    for device in ctx.devices:
        for i, (n, v) in enumerate([(1, 1), (4, 3), (7, 33), (6, 1001), (3, 4099)]):
            for k, dtype in enumerate(DTYPES):
                reduction = ("mean", "sum", "none")[(i + k) % 3]
                eps = (0.0, 0.1)[(i + k) % 2]
                layout = ("contiguous", "padded", "offset")[(i + k) % 3]
                what = (
                    f"logits [{n}, {v}] {dtype} {layout}, reduction={reduction!r}, label_smoothing={eps}, on {device}"
                )
                ctx.case(f"cross_entropy_inplace_, {what}")
                x = _logits(n, v, dtype, device, g, layout=layout, extreme_rows=1 if n > 2 else 0)
                t = _targets(n, v, device, g)
                before = x.detach().cpu().clone()
                want_loss, _ = _op(before.to(device=device, dtype=x.dtype), t, IGNORE, eps, reduction)
                loss = torch.ops.course.cross_entropy_inplace_(x, t, IGNORE, eps, REDUCTIONS[reduction])
                _close(loss, reference(before, t, IGNORE, eps, reduction), "the loss of cross_entropy_inplace_")
                _close(loss, want_loss.double(), "the loss of cross_entropy_inplace_ against cross_entropy's")
                ones = torch.ones(loss.shape, dtype=torch.float64)
                want = reference_grad(before, t, ones, IGNORE, eps, reduction)
                _close_grad(x, want, before, t, ones, IGNORE, reduction, "the gradient written over the logits")
                ctx.case(f"cross_entropy(..., inplace_grad=True) and autograd, {what}")
                x = _logits(n, v, dtype, device, g, layout=layout).requires_grad_()
                before = x.detach().cpu().clone()
                loss = side.cross_entropy(x, t, IGNORE, eps, reduction, inplace_grad=True)
                gl = (torch.rand(loss.shape, generator=g, dtype=torch.float64) + 0.5).to(device=device, dtype=x.dtype)
                if i % 2 and reduction != "none":
                    gl = torch.ones_like(gl)  # the usual backward of a scalar loss: the scale skips every row
                (grad,) = torch.autograd.grad(loss, x, gl)
                want = reference_grad(before, t, gl, IGNORE, eps, reduction)
                _close_grad(grad, want, before, t, gl, IGNORE, reduction, "the gradient of the inplace_grad path")
                n_cases += 2
        ctx.case(f"inplace_grad=True on logits that do not require grad, on {device}")
        x = _logits(5, 40, "float32", device, g)
        x0 = x.clone()
        t = _targets(5, 40, device, g)
        _close(side.cross_entropy(x, t, inplace_grad=True), reference(x0, t), "the loss")
        if not torch.equal(x, x0):
            raise Fail("inplace_grad=True changed logits that need no gradient: nothing asked for one")
        ctx.case(f"inplace_grad=True on logits an earlier op saved for its backward (logits = h.exp()), on {device}")
        h = _logits(5, 40, "float32", device, g, scale=0.5).requires_grad_()
        loss = side.cross_entropy(h.exp(), t, inplace_grad=True)
        try:
            loss.backward()
        except RuntimeError as e:
            if "modified by an inplace operation" not in str(e):
                raise Fail(f"backward failed, but not for the overwritten logits: {str(e).splitlines()[0]}") from None
        else:
            raise Fail(
                "h.exp()'s backward ran on the gradient written over its output: cross_entropy_inplace_ must declare "
                "that it writes logits (Tensor(a!)), so that autograd sees the version change"
            )
    return (
        f"{n_cases} cases: the loss, the gradient over the logits, and through autograd, on {' and '.join(ctx.devices)}"
    )


def check_saves_no_softmax(ctx) -> str:
    """What autograd keeps between forward and backward on the non-inplace path: the logits, the target and a few
    numbers per row (lse), never a [N, V] tensor beside the logits (a softmax kept for backward doubles the
    memory the loss needs)."""
    x = torch.randn(16, 300).requires_grad_()
    t = torch.randint(0, 300, (16,))
    ctx.case("logits [16, 300] float32 on cpu: the tensors saved for backward")
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda a: saved.append(a) or a, lambda a: a):
        _op(x, t, IGNORE, 0.1, "mean")
    ptr = x.untyped_storage().data_ptr()
    big = [a for a in saved if a.untyped_storage().data_ptr() != ptr and a.numel() > 4 * x.shape[0]]
    if big:
        what = ", ".join(f"{list(a.shape)} {_name(a.dtype)}" for a in big)
        raise Fail(f"autograd keeps {what} beside the logits: save lse (N values) and recompute the softmax")
    if not any(a.untyped_storage().data_ptr() == ptr for a in saved):
        raise Fail("the logits are not saved for backward: backward needs them (is the autograd formula registered?)")
    extra = sum(a.numel() for a in saved if a.untyped_storage().data_ptr() != ptr)
    return f"saves the logits and {extra} more values (N = {x.shape[0]}): no softmax"


def check_errors(ctx) -> str:
    """Bad input gets an error that names the argument (a Python exception, never a crash or a result). A target
    outside [0, V) on the CPU is an error naming target; on the GPU the op either raises one or gives that row a
    NaN loss (a device-side check would need a synchronization, or an assert that ends the process's GPU use),
    and the GPU works afterwards."""
    ce, bwd = torch.ops.course.cross_entropy, torch.ops.course.cross_entropy_backward
    inplace = torch.ops.course.cross_entropy_inplace_

    def x(d, *shape, dtype=torch.float32):
        return torch.randn(shape, device=d).to(dtype)

    def t(d, *vals):
        return torch.tensor(vals, device=d)

    cases = [
        (
            "logits of dtype int32",
            "logits",
            lambda d: ce(torch.ones(3, 5, dtype=torch.int32, device=d), t(d, 0, 1, 2), -100, 0.0, 1),
        ),
        ("logits 1-D", "logits", lambda d: ce(x(d, 5), t(d, 0), -100, 0.0, 1)),
        ("logits 3-D", "logits", lambda d: ce(x(d, 2, 3, 5), t(d, 0, 1), -100, 0.0, 1)),
        ("logits with no class, [3, 0]", "logits", lambda d: ce(x(d, 3, 0), t(d, 0, 0, 0), -100, 0.0, 1)),
        ("target of dtype float32", "target", lambda d: ce(x(d, 3, 5), t(d, 0.0, 1.0, 2.0), -100, 0.0, 1)),
        ("target of dtype int32", "target", lambda d: ce(x(d, 3, 5), t(d, 0, 1, 2).int(), -100, 0.0, 1)),
        ("target [4] for logits [3, 5]", "target", lambda d: ce(x(d, 3, 5), t(d, 0, 1, 2, 3), -100, 0.0, 1)),
        ("label_smoothing 1.5", "label_smoothing", lambda d: ce(x(d, 3, 5), t(d, 0, 1, 2), -100, 1.5, 1)),
        ("label_smoothing -0.1", "label_smoothing", lambda d: ce(x(d, 3, 5), t(d, 0, 1, 2), -100, -0.1, 1)),
        ("reduction 3", "reduction", lambda d: ce(x(d, 3, 5), t(d, 0, 1, 2), -100, 0.0, 3)),
        (
            "backward: grad_loss [3] for a mean (a scalar)",
            "grad_loss",
            lambda d: bwd(x(d, 3), x(d, 3, 5), t(d, 0, 1, 2), x(d, 3), -100, 0.0, 1),
        ),
        (
            "backward: grad_loss float64, logits float32",
            "grad_loss",
            lambda d: bwd(x(d, 3, dtype=torch.float64), x(d, 3, 5), t(d, 0, 1, 2), x(d, 3), -100, 0.0, 0),
        ),
        (
            "backward: lse [2] for 3 rows",
            "lse",
            lambda d: bwd(x(d), x(d, 3, 5), t(d, 0, 1, 2), x(d, 2), -100, 0.0, 1),
        ),
        (
            "backward: lse float16 (lse is float32)",
            "lse",
            lambda d: bwd(x(d), x(d, 3, 5), t(d, 0, 1, 2), x(d, 3, dtype=torch.float16), -100, 0.0, 1),
        ),
        (
            "cross_entropy_inplace_ on transposed logits",
            "logits",
            lambda d: inplace(x(d, 5, 3).t(), t(d, 0, 1, 2), -100, 0.0, 1),
        ),
    ]
    cpu_only = [
        ("target 5 for logits of 5 classes", "target", lambda d: ce(x(d, 3, 5), t(d, 0, 5, 1), -100, 0.0, 1)),
        ("target -3 (ignore_index is -100)", "target", lambda d: ce(x(d, 3, 5), t(d, 0, -3, 1), -100, 0.0, 0)),
    ]
    if "cuda" in ctx.devices:
        cases.append(
            (
                "target on the CPU, logits on the GPU",
                "target",
                lambda d: ce(x("cuda", 3, 5), t("cpu", 0, 1, 2), -100, 0.0, 1),
            )
        )
    n = 0
    for device in ctx.devices:
        for what, name, call in cases + (cpu_only if device == "cpu" else []):
            ctx.case(f"{what}, on {device}")
            grade.expect_error(what, name, lambda: call(device), device)
            n += 1
    side = _python_side(ctx)
    ctx.case("cross_entropy(..., reduction='avg') in Python")
    grade.expect_error(
        "reduction='avg'",
        "reduction",
        lambda: side.cross_entropy(x("cpu", 3, 5), t("cpu", 0, 1, 2), reduction="avg"),
        "cpu",
    )
    n += 1
    if "cuda" in ctx.devices:
        for bad in (5, -3):
            ctx.case(f"target {bad} for logits of 5 classes, on cuda: an error naming target, or a NaN loss")
            logits, target = x("cuda", 3, 5), t("cuda", 0, bad, 1)
            try:
                loss = ce(logits, target, -100, 0.0, 0)[0]
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                if not re.search(r"(?<![A-Za-z0-9_])target(?![A-Za-z0-9_])", str(e)):
                    raise Fail(f"target {bad}: the error does not name target: {str(e).splitlines()[0]}") from None
            else:
                if not torch.isnan(loss[1]).item():
                    raise Fail(
                        f"target {bad} of 5 classes gave the loss {float(loss[1])}: an error or NaN, not a value"
                    )
            ok = ce(logits, t("cuda", 0, 1, 2), -100, 0.0, 1)[0]
            torch.cuda.synchronize()
            _close(ok, reference(logits, t("cpu", 0, 1, 2)), "the loss of the call after the bad target")
            n += 1
    gpu = "; a bad target on the GPU: a NaN loss, and the GPU still working" if "cuda" in ctx.devices else ""
    return f"{n} bad inputs, each an error naming the argument{gpu}"


def check_opcheck(ctx) -> str:
    """torch.library.opcheck on each of the four ops: the schema matches what the kernels do (the in-place ops
    declare what they write), the fake kernels match the real ones (shape, dtype, strides), autograd is
    registered, and the ops trace."""
    g = ctx.generator("opcheck")
    n = 0
    for device in ctx.devices:
        t = _targets(6, 40, device, g)
        samples = [
            ("cross_entropy", lambda: (_logits(6, 40, "float32", device, g), t, IGNORE, 0.0, 1)),
            ("cross_entropy", lambda: (_logits(6, 40, "float32", device, g).requires_grad_(), t, IGNORE, 0.1, 0)),
            ("cross_entropy", lambda: (_logits(6, 40, "bfloat16", device, g, layout="padded"), t, IGNORE, 0.1, 2)),
            (
                "cross_entropy_backward",
                lambda: (
                    torch.tensor(0.7, device=device),
                    _logits(6, 40, "float32", device, g),
                    t,
                    torch.randn(6, generator=g).to(device) + 4,
                    IGNORE,
                    0.1,
                    1,
                ),
            ),
            ("cross_entropy_inplace_", lambda: (_logits(6, 40, "float32", device, g), t, IGNORE, 0.1, 1)),
            ("cross_entropy_inplace_", lambda: (_logits(6, 40, "bfloat16", device, g), t, IGNORE, 0.0, 0)),
            ("cross_entropy_scale_", lambda: (_logits(6, 40, "float32", device, g), torch.tensor(0.5, device=device))),
            (
                "cross_entropy_scale_",
                lambda: (_logits(6, 40, "float32", device, g), torch.rand(6, generator=g).to(device)),
            ),
        ]
        for name, make in samples:
            args = make()
            desc = ", ".join(
                f"{list(a.shape)} {_name(a.dtype)}" if isinstance(a, torch.Tensor) else repr(a) for a in args
            )
            ctx.case(f"opcheck course::{name}({desc}) on {device}")
            try:
                torch.library.opcheck(getattr(torch.ops.course, name), args)
            except Exception as e:  # noqa: BLE001  (OpCheckError, or what the op raised inside it)
                text = str(e).replace(" (scroll up for stack trace)", "")
                raise Fail("opcheck: " + "\n".join(text.strip().splitlines()[:6])) from None
            _fake_matches(name, make())
            n += 1
    return f"{n} samples of the four ops: schemas, fake kernels (and their strides), autograd, traced"


def _fake_matches(name: str, args) -> None:
    """Each output of the fake kernel has the real one's shape, dtype and strides: torch.compile plans the memory of
    what follows from the fake's (opcheck compares shapes and dtypes, not strides)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = getattr(torch.ops.course, name)
    ins = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    real = op(*[a.clone() if isinstance(a, torch.Tensor) else a for a in ins])
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in ins]
    with mode:
        fake = op(*fakes)
    reals = real if isinstance(real, tuple) else (real,)
    fakes_out = fake if isinstance(fake, tuple) else (fake,)
    for i, (r, f) in enumerate(zip(reals, fakes_out)):
        if r is None and f is None:
            continue
        where = f"course::{name}'s fake kernel (output {i})"
        for what, a, b in (("shape", tuple(r.shape), tuple(f.shape)), ("strides", r.stride(), f.stride())):
            if a != b:
                raise Fail(f"{where} returns {what} {b}, the kernel {a}: torch.compile plans memory from the fake's")
        if r.dtype != f.dtype:
            raise Fail(f"{where} returns {f.dtype}, the kernel {r.dtype}")


def check_compile(ctx) -> str:
    """torch.compile(fullgraph=True) of a language model's head and loss, h @ w then cross_entropy, forward and
    backward, at two shapes, each reduction: the eager values and gradients. On the CPU the tracing only
    (backend="aot_eager"); on a GPU the full compile. (The inplace_grad path is eager only.)"""
    g = ctx.generator("compile")
    side = _python_side(ctx)
    for device in ctx.devices:
        backend = "inductor" if device == "cuda" else "aot_eager"

        def head(h, w, t, reduction):
            loss = side.cross_entropy(h @ w, t, ignore_index=IGNORE, label_smoothing=0.1, reduction=reduction)
            return loss.sum()

        torch._dynamo.reset()
        compiled = torch.compile(head, fullgraph=True, backend=backend)
        for (n, v), reduction in (((6, 10), "mean"), ((9, 33), "none"), ((9, 33), "sum")):
            ctx.case(
                f"torch.compile(fullgraph=True, backend={backend!r}), h [{n}, 16] @ w [16, {v}], {reduction!r}, on {device}"
            )
            h = _logits(n, 16, "float32", device, g, scale=0.3)
            w = _logits(16, v, "float32", device, g, scale=0.3).requires_grad_()
            t = _targets(n, v, device, g)
            try:
                got = compiled(h, w, t, reduction)
                got.backward()
            except Exception as e:  # noqa: BLE001  (a graph break or a trace error: its first lines say which)
                raise Fail(
                    f"torch.compile: {type(e).__name__}: " + "\n".join(str(e).strip().splitlines()[:5])
                ) from None
            grad, w.grad = w.grad.clone(), None
            want = head(h, w, t, reduction)
            want.backward()
            try:
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                torch.testing.assert_close(grad, w.grad, rtol=1e-4, atol=1e-4)
            except AssertionError as e:
                raise Fail("compiled and eager differ: " + str(e).strip().splitlines()[0]) from None
    return "fullgraph, forward and backward, three reductions: the eager values and gradients"


def check_stream(ctx) -> str:
    """The ops run on PyTorch's current stream: on a side stream, the inputs are written after a long sleep and the
    op called right after; an op that launches elsewhere reads them before they are written."""
    if "cuda" not in ctx.devices:
        raise Skip("no GPU")
    g = ctx.generator("stream")
    side = torch.cuda.Stream()
    # Warm-up: the first launch of a kernel loads its module, which waits for the whole device, and would order a
    # launch on the wrong stream after the sleep by accident.
    warm = torch.randn(4, 64, device="cuda")
    wt = torch.tensor([0, 1, -100, 3], device="cuda")
    with torch.cuda.stream(side):
        for red in (0, 1):
            loss, lse = torch.ops.course.cross_entropy(warm, wt, IGNORE, 0.1, red)
            torch.ops.course.cross_entropy_backward(torch.ones_like(loss), warm, wt, lse, IGNORE, 0.1, red)
            torch.ops.course.cross_entropy_inplace_(warm.clone(), wt, IGNORE, 0.1, red)
            torch.ops.course.cross_entropy_scale_(warm.clone(), torch.full_like(loss, 0.5))
    torch.cuda.synchronize()
    for what in ("forward", "backward", "inplace"):
        ctx.case(f"{what} on a side stream, after torch.cuda._sleep on it")
        src = _logits(256, 4099, "float32", "cuda", g)
        t_src = _targets(256, 4099, "cuda", g)
        x, t = torch.zeros_like(src), torch.zeros_like(t_src)
        loss0, lse0 = _op(src, t_src, IGNORE, 0.1, "mean")
        gl = torch.full_like(loss0, 0.5)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # tens of milliseconds: far longer than a launch
            x.copy_(src)
            t.copy_(t_src)
            if what == "forward":
                out = _op(x, t, IGNORE, 0.1, "mean")[0]
            elif what == "backward":
                out = torch.ops.course.cross_entropy_backward(gl, x, t, lse0, IGNORE, 0.1, 1)
            else:
                out = torch.ops.course.cross_entropy_inplace_(x, t, IGNORE, 0.1, 1)
        side.synchronize()
        torch.cuda.synchronize()
        if what == "forward" or what == "inplace":
            _close(out, reference(src, t_src, IGNORE, 0.1), f"{what}'s loss")
        if what != "forward":
            got = out if what == "backward" else x
            scale = gl if what == "backward" else torch.ones_like(gl)
            want = reference_grad(src, t_src, scale, IGNORE, 0.1)
            _close_grad(got, want, src.cpu(), t_src, scale, IGNORE, "mean", f"{what}'s gradient")
    return "forward, backward and the in-place pass ordered after earlier work on the current stream"


def _extra_peak(fn) -> int:
    """Bytes allocated at the peak of fn() beyond what was allocated before it (its inputs)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _fwd_bwd(loss_fn, x):
    """Forward and backward as a training step meets them: the loss of fresh leaf logits, then their gradient
    (torch.autograd.grad: the gradient as backward made it, no copy into .grad)."""
    leaf = x.detach().requires_grad_()
    (grad,) = torch.autograd.grad(loss_fn(leaf), leaf)
    return grad


def check_memory(ctx) -> str:
    """Peak memory of forward + backward beyond the logits (torch.cuda.max_memory_allocated) at [2048, 32000]
    bfloat16: the default path keeps no [N, V] tensor but the gradient (at most 1.25 logits more), the
    inplace_grad path none (at most 0.25), both below native F.cross_entropy's."""
    if "cuda" not in ctx.devices:
        raise Skip("no GPU")
    side = _python_side(ctx)
    n, v = 2048, 32000
    g = ctx.generator("memory")
    t = _targets(n, v, "cuda", g, ignored=0.1)
    nbytes = n * v * 2
    peaks = {}
    for what, fn in (
        ("native", lambda a: torch.nn.functional.cross_entropy(a, t)),
        ("yours", lambda a: side.cross_entropy(a, t)),
        ("yours, inplace_grad", lambda a: side.cross_entropy(a, t, inplace_grad=True)),
    ):
        ctx.case(f"peak memory of forward+backward, {what}, logits [{n}, {v}] bfloat16")
        x = _logits(n, v, "bfloat16", "cuda", g)
        peaks[what] = _extra_peak(lambda: _fwd_bwd(fn, x)) / nbytes
        x = None  # freed before the next one's peak
    text = ", ".join(f"{k} {p:.2f}" for k, p in peaks.items())
    if peaks["yours"] > min(1.25, peaks["native"]) or peaks["yours, inplace_grad"] > min(0.25, peaks["native"]):
        raise Fail(f"peak memory beyond the logits, in logits' sizes: {text}: a [N, V] tensor more than needed")
    return f"peak memory beyond the logits, in logits' sizes: {text}"


def _liger():
    try:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    except Exception:  # noqa: BLE001  (not installed, or no Triton here)
        return None
    return LigerCrossEntropyFunction


def check_speed(ctx) -> str:
    """Forward and forward+backward at a LLaMA-3 vocabulary (V = 128256) for N = 4096 (bfloat16, float32) and 8192
    (bfloat16), fresh inputs for every timed call, against native F.cross_entropy, torch.compile and Liger-Kernel's
    LigerCrossEntropyFunction (where installed), as % of a copy of the bytes the task needs: forward reads the
    logits once; forward+backward reads them once and writes the gradient once (what the in-place path and Liger
    do; the default path reads them twice). Peak memory beside. A time well below a copy's is impossible and
    fails the check."""
    from helpers import bench

    if "cuda" not in ctx.devices:
        raise Skip("no GPU: timings need one")
    side = _python_side(ctx)
    liger = _liger()
    v = 128256
    lines, impossible = [], []
    native = torch.nn.functional.cross_entropy
    compiled = torch.compile(native)
    for n, dtype in ((4096, torch.bfloat16), (4096, torch.float32), (8192, torch.bfloat16)):
        g = torch.Generator(device="cuda").manual_seed(ctx.seed)
        xs = [torch.randn(n, v, device="cuda", generator=g).to(dtype) for _ in range(3)]
        t = torch.randint(0, v, (n,), device="cuda", generator=g)
        t[::50] = IGNORE
        k = [0]

        def fresh():  # each timed call takes the next of 3 inputs: a result cached by input cannot be replayed
            k[0] = (k[0] + 1) % 3
            return xs[k[0]]

        impls = {
            "yours": lambda a: side.cross_entropy(a, t),
            "native": lambda a: native(a, t),
            "torch.compile": lambda a: compiled(a, t),
        }
        if liger:
            impls["Liger-Kernel"] = lambda a: liger.apply(a, t, None, IGNORE, 0.0, 0.0, "mean", None, False)[0]
        both = dict(impls)
        both["yours, inplace_grad"] = lambda a: side.cross_entropy(a, t, inplace_grad=True)
        esize = xs[0].element_size()
        shape = f"[{n}, {v}] {_name(dtype)}"
        for what, nbytes, fns in (
            ("forward", n * v * esize, {name: (lambda f: lambda: f(fresh()))(f) for name, f in impls.items()}),
            (
                "forward+backward",
                2 * n * v * esize,
                {name: (lambda f: lambda: _fwd_bwd(f, fresh()))(f) for name, f in both.items()},
            ),
        ):
            ctx.case(f"{what}, {shape}")
            with torch.no_grad() if what == "forward" else torch.enable_grad():
                res = {r["impl"]: r for r in bench.compare(fns, nbytes=nbytes, device="cuda")}
            mine = [name for name in res if name.startswith("yours")]
            theirs = [name for name in res if not name.startswith("yours")]
            for name in mine:
                r = res[name]
                line = f"{what:<16} {shape:<22} {name:<20} {r['ms']:.3f} ms, {r['pct_copy']:.0f} % of a copy; "
                line += ", ".join(f"{o} {res[o]['ms'] / r['ms']:.2f}x" for o in theirs)
                lines.append(line)
                if r["pct_copy"] > IMPOSSIBLE_PCT:
                    impossible.append(f"{what} {shape} {name}: {r['pct_copy']:.0f} % of a copy of the same bytes")
            if what == "forward+backward" and n == 4096:
                x = xs[0]
                peaks = {name: _extra_peak(lambda f=f: _fwd_bwd(f, x)) / (n * v * esize) for name, f in both.items()}
                lines.append(
                    "peak memory beyond the logits, in logits' sizes: "
                    + ", ".join(f"{a} {p:.2f}" for a, p in peaks.items())
                )
        xs = None  # freed before the next shape's
        torch.cuda.empty_cache()
    if not liger:
        lines.append("Liger-Kernel is not installed here: not compared (pip install liger-kernel)")
    text = "times as ratios: theirs / yours (above 1: yours is faster)\n" + "\n".join(lines)
    if impossible:
        raise Fail(
            "impossible: faster than a copy of the bytes the op must move (is work skipped, cached, or on another "
            "stream?):\n" + "\n".join(impossible) + "\n" + text
        )
    return text


HINTS = {
    "forward": "compare the case with your row loop: the max subtracted before exp (logits of 1e4), the sum rescaled "
    "when the max grows, -inf logits adding nothing, the target's logit from its own row, loss 0 for ignored rows, "
    "the mean over the rows that are not ignored",
    "inputs_unchanged": "forward and backward read the logits (const pointers); only cross_entropy_inplace_ writes them",
    "backward": "d loss / d x_j = exp(x_j - lse) - eps / V - (1 - eps) [j == t], times the incoming gradient (per row "
    "for reduction 'none') and 1 / (rows not ignored) for the mean; 0 on ignored rows",
    "inplace": "the in-place pass writes the same gradient as backward with an incoming gradient of 1; its autograd "
    "Function's backward scales the saved gradient by grad_loss (course::cross_entropy_scale_)",
    "saves_no_softmax": "setup_context saves logits, target and lse: backward recomputes exp(x - lse) row by row",
    "errors": "the glue checks every argument before using it and names it in the message",
    "opcheck": "the fake kernels return new tensors of the kernels' shapes and dtypes (lse is float32, float64 for "
    "float64 logits); the in-place ops' schemas mark what they write (Tensor(a!))",
    "compile": "the autograd formula calls the ops through torch.ops.course, and setup_context saves tensors only "
    "through ctx.save_for_backward",
    "stream": "launch every kernel on the stream the glue passes (OnDevice(x).stream)",
    "memory": "no [N, V] tensor beside the logits but the gradient; the in-place path allocates none",
}

# --------------------------------------------------------------------------------------------------
# The corpus: wrong and cheating answers, each the solution with a few edits, and the check that rejects it
# --------------------------------------------------------------------------------------------------

E = grade_corpus.E
_CPU_ROW = (
    "    A m = ce_neg_inf<A>(), s = 0, sx = 0;\n    for (int64_t j = 0; j < V; ++j) ce_add(A(row[j]), m, s, sx);\n"
)
CORPUS = [
    E(
        "lse_without_the_max",
        "lse = log(sum(exp(x))) with no max subtracted: exp(1e4) is inf, so large logits give inf or NaN",
        "forward",
        "cpu",
        (
            "cross_entropy.cpu.cpp",
            _CPU_ROW,
            "    A m = 0, s = 0, sx = 0;\n"
            "    for (int64_t j = 0; j < V; ++j) s += std::exp(A(row[j])), sx += A(row[j]);\n",
        ),
        ("cross_entropy.cpu.cpp", "#include <limits>\n", "#include <cmath>\n#include <limits>\n"),
    ),
    E(
        "mean_over_every_row",
        "the mean divides by all N rows, the ignored ones too (F.cross_entropy divides by the rows it counts)",
        "forward",
        "cpu",
        (
            "cross_entropy.cpp",
            "reduction == kReduceMean ? sum / double(count) : sum;",
            "reduction == kReduceMean ? sum / double(row_loss.numel()) : sum;",
        ),
    ),
    E(
        "smoothing_uniform_term_forgotten_in_backward",
        "the gradient leaves out label smoothing's uniform term, - eps / V, on every class",
        "backward",
        "cpu",
        ("cross_entropy_math.h", "(ce_exp(x - lse) - uniform - (is_target", "(ce_exp(x - lse) - (is_target"),
    ),
    E(
        "gradient_not_scaled_by_grad_loss",
        "the CPU gradient loop ignores the incoming gradient grad_loss (right only when it is 1)",
        "backward",
        "cpu",
        (
            "cross_entropy.cpu.cpp",
            "const A g = A(scale) * (grad_loss ? A(grad_loss[r * grad_loss_step]) : A(1));",
            "const A g = A(scale);",
        ),
    ),
    E(
        "target_logit_from_the_first_row",
        "the target's logit is read from row 0 (x[t]) instead of its own row (row[t])",
        "forward",
        "cpu",
        ("cross_entropy.cpu.cpp", "ce_loss(m, s, sx, A(row[t]), A(eps), V)", "ce_loss(m, s, sx, A(x[t]), A(eps), V)"),
    ),
    E(
        "inplace_backward_forgets_grad_loss",
        "the in-place path's backward hands on the stored gradient without scaling it by grad_loss",
        "inplace",
        "cpu",
        ("cross_entropy.py", "        torch.ops.course.cross_entropy_scale_(grad, grad_loss)\n", ""),
    ),
    E(
        "saves_the_softmax",
        "setup_context saves softmax(logits) for backward: a second [N, V] tensor alive between forward and backward",
        "saves_no_softmax",
        "cpu",
        (
            "cross_entropy.py",
            "ctx.save_for_backward(logits, target, lse)",
            "ctx.save_for_backward(logits, target, lse, torch.softmax(logits.float(), dim=1))",
        ),
        ("cross_entropy.py", "logits, target, lse = ctx.saved_tensors", "logits, target, lse, _ = ctx.saved_tensors"),
    ),
    E(
        "ignored_rows_count_in_the_loss",
        "the ignore_index test left out: an ignored row falls to the out-of-range branch, its loss NaN instead of 0",
        "forward",
        "cpu",
        ("cross_entropy.cpu.cpp", "    if (t == ignore_index)\n      loss[r] = 0;\n    else if", "    if"),
    ),
    E(
        "target_error_names_nothing",
        "a target out of range is refused with a message that does not say which argument is wrong",
        "errors",
        "cpu",
        ("cross_entropy.cpp", '"target[", std::to_string(r), "] = "', '"index ", std::to_string(r), ": "'),
        ("cross_entropy.cpp", '" is out of range: a target must be in [0, "', '" is out of range: it must be in [0, "'),
    ),
    E(
        "loss_cached_by_input",
        "an exploit: the loss and lse remembered by the logits' address and returned again for the same tensor",
        "forward",
        "cpu",
        (
            "cross_entropy.cpp",
            "  check_options(label_smoothing, reduction);\n  const at::Tensor logits = rows_unit_stride(logits_in), "
            "target = target_in.contiguous();\n  const int64_t N",
            "  check_options(label_smoothing, reduction);\n"
            "  static std::map<const void*, std::tuple<at::Tensor, at::Tensor>> cache;\n"
            "  if (cache.count(logits_in.data_ptr())) return cache[logits_in.data_ptr()];\n"
            "  const at::Tensor logits = rows_unit_stride(logits_in), target = target_in.contiguous();\n  const int64_t N",
        ),
        (
            "cross_entropy.cpp",
            "  return {loss, lse};\n}\n\nat::Tensor cross_entropy_backward_kernel",
            "  cache[logits_in.data_ptr()] = {loss, lse};\n  return {loss, lse};\n}\n\n"
            "at::Tensor cross_entropy_backward_kernel",
        ),
        ("cross_entropy.cpp", "#include <algorithm>\n", "#include <algorithm>\n#include <map>\n"),
    ),
    E(
        "inplace_gradient_without_the_mean",
        "the in-place kernel writes the gradient of the sum where the mean's is asked (the 1 / count left out)",
        "inplace",
        "cuda",
        ("cross_entropy.cu", "const A scale = count ? A(1.0 / *count) : A(1);", "const A scale = 1;"),
    ),
    E(
        "kernels_on_the_legacy_stream",
        "an exploit of ordering: the forward's row kernel launched on the legacy default stream, not PyTorch's current one",
        "stream",
        "cuda",
        (
            "cross_entropy.cu",
            "  kernel<<<blocks, threads, 0, stream>>>(x, grad, ld,",
            "  kernel<<<blocks, threads, 0, nullptr>>>(x, grad, ld,",
        ),
    ),
]
