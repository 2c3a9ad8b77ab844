"""The grader's spec for lesson 09's course::masked_softmax: attention's softmax with its masks fused,
y = softmax(scale * x + mask) over the last dimension of the scores x [..., Lq, Lk].

The masks, as the grader's float64 reference (`reference`) applies them:
* causal: key j of query i is masked when j > i, scaled_dot_product_attention's is_causal (its mask is
  ones(Lq, Lk).tril(0): aligned to the top left when Lq != Lk);
* key_padding_mask [B, Lk] (bool, True = keep, B = x.size(0)): the same keys masked for every head and query of
  batch b;
* a row whose keys are all masked is all zeros (native softmax gives NaN there).

The checks (`check_<name>` below; build, registered and integrity are helpers/grade.py's): forward on hidden cases
(Lk of 1, 3, 31, 32, 33, 1000, 1025, 4097 and past 16384, Lq != Lk, empty dimensions, random masks with all-masked
rows, scales from -0.5 to 2.5 and 0, every dtype and layout, large scores), inputs_unchanged, backward (gradcheck in
float64, then every dtype against the formula on the op's own y), saves_only_y, errors (each names its argument),
opcheck, compile, stream (GPU), speed (GPU: B=8, H=16, Lq=1024, Lk=1024 causal and 4096 padded, bf16 and fp32,
against native, torch.compile and Liger-Kernel's unmasked softmax).
"""

from __future__ import annotations

import math

from .. import grade
from ..grade import DTYPES, IMPOSSIBLE_PCT, TOLERANCES, Fail, Skip, _canary, _rand
from ..grade_corpus import E

NAME = "masked_softmax"
SCHEMAS = {
    "course::masked_softmax": (
        "course::masked_softmax(Tensor x, Tensor? key_padding_mask, float scale, bool causal) -> Tensor"
    ),
    "course::masked_softmax_backward": (
        "course::masked_softmax_backward(Tensor grad_y, Tensor y, float scale) -> Tensor"
    ),
}
CHECKS = [
    "build",
    "registered",
    "forward",
    "inputs_unchanged",
    "backward",
    "saves_only_y",
    "errors",
    "opcheck",
    "compile",
    "stream",
    "speed",
    "integrity",
]
TASK = (
    "Attention's softmax with its masks fused: y = softmax(scale * x + mask) over the last dimension of the scores "
    "x [..., Lq, Lk], where the mask is -inf at key j of query i when causal (j > i, as scaled_dot_product_attention's "
    "is_causal) or when key_padding_mask [B, Lk] (True = keep) drops key j of batch b; a row with no key kept is all "
    "zeros. Backward from the saved y alone: grad_x = scale * y * (grad_y - sum_j grad_y[j] * y[j]). You write which "
    "keys a row keeps (masked_softmax_math.h), the CPU loops, the CUDA kernels (one warp per row up to 1024 keys, one "
    "block per row beyond) and the autograd formula; the glue, the schemas and the launchers are given."
)
LINES = 170
HINTS = {
    "forward": "compare the case with your loop: the max over the kept keys only (exp(z - max) <= 1 cannot overflow), "
    "the scale inside the exponential, the causal limit (key j kept while j <= i: the diagonal is kept), the padding "
    "row of the batch (r / rows_per_batch, indexed by the key j), and a row with no key kept (max = -inf: zeros, "
    "not exp(-inf + inf) = NaN)",
    "inputs_unchanged": "the kernels read x, grad_y and y (const pointers) and write only their own output",
    "backward": "grad_x = scale * y * (grad_y - dot) with dot = sum_j grad_y[j] * y[j] over the whole row, in float; "
    "masked_softmax.py's register(lib) registers the formula (setup_context saves the output)",
    "saves_only_y": "ctx.save_for_backward(output) and nothing else: the gradient needs y, not x and not the mask",
    "errors": "the glue's checks are given: an error here means they were changed",
    "opcheck": "the fake kernels: a new contiguous tensor of x's (or y's) shape, dtype and device, computing nothing",
    "compile": "torch.compile traces through the fake kernels and the autograd formula: call the ops through "
    "torch.ops.course in backward, and return one gradient per input (None for the mask, the scale and causal)",
    "stream": "launch every kernel on the stream the launcher is given (the glue passes PyTorch's current one)",
}


# --------------------------------------------------------------------------------------------------
# The reference
# --------------------------------------------------------------------------------------------------


def keep(shape, key_padding_mask=None, causal: bool = False):
    """Which keys each row keeps, bool, broadcastable to `shape` ([..., Lq, Lk]), on the CPU."""
    import torch

    Lk = shape[-1]
    kept = torch.ones((), dtype=torch.bool).expand(*shape) if len(shape) else torch.ones((), dtype=torch.bool)
    if causal:
        kept = kept & torch.ones(shape[-2], Lk, dtype=torch.bool).tril()
    if key_padding_mask is not None:
        kept = kept & key_padding_mask.cpu().reshape(shape[0], *([1] * (len(shape) - 2)), Lk)
    return kept


def reference(x, key_padding_mask=None, scale: float = 1.0, causal: bool = False):
    """y in float64: the masked keys at -inf, exp(z - max) over the kept ones, a row with none kept all zeros."""
    import torch

    z = x.detach().double().cpu() * scale
    if z.numel() == 0:
        return z.clone()
    kept = keep(z.shape, key_padding_mask, causal)
    z = z.masked_fill(~kept, -math.inf)
    m = z.amax(dim=-1, keepdim=True)
    m = torch.where(m == -math.inf, torch.zeros_like(m), m)
    e = torch.exp(z - m)
    s = e.sum(dim=-1, keepdim=True)
    return torch.where(s > 0, e / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(e))


def reference_grad(grad_y, y, scale: float):
    """grad_x in float64 from y (the op's own output) and grad_y: scale * y * (grad_y - sum_j grad_y[j] * y[j])."""
    y, gy = y.detach().double().cpu(), grad_y.detach().double().cpu()
    return scale * y * (gy - (gy * y).sum(dim=-1, keepdim=True))


# Float math's rounding, per unit of the quantity it scales with (below): 2^-21, four float ulps with a margin;
# float64's the same way.
_MATH_EPS = {"torch.float64": 1e-13}
_FLOAT_EPS = 2.0**-21


def _close_y(got, want, x, scale: float, kept, what: str = "y") -> None:
    """y against the float64 reference: the dtype's tolerance, plus the rounding float math makes to scale * x,
    which native's softmax makes too: an error of eps * |z| in each exponent, relative in y, largest in a row with
    large scores (z = scale * x of the row's kept keys)."""
    tol = TOLERANCES[str(got.dtype)]
    eps = _MATH_EPS.get(str(got.dtype), _FLOAT_EPS)
    z = (x.detach().double().cpu() * abs(scale)).abs().masked_fill(~kept, 0)
    zmax = z.amax(dim=-1, keepdim=True) if z.numel() else z
    want = want.double()
    err = (got.detach().double().cpu() - want).abs()
    bound = tol["rtol"] * want.abs() + tol["atol"] + eps * 2 * zmax * want.abs()
    bad = ~(err <= bound)  # NaN counts as wrong
    if bad.any():
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise Fail(
            f"{what} differs from the float64 reference at {int(bad.sum())} of {bad.numel()} elements; the first at "
            f"{list(i)}: {float(got[i])} where {float(want[i])} is right (allowed: {float(bound[i]):.3g})"
        )


def _close_grad(got, want, grad_y, y, scale: float) -> None:
    """grad_x against the formula on the op's own y in float64: the dtype's tolerance, plus float's rounding of the
    difference grad_y - dot (dot sums |grad_y * y| over the row), times scale * y."""
    tol = TOLERANCES[str(got.dtype)]
    eps = _MATH_EPS.get(str(got.dtype), _FLOAT_EPS) * 8  # a sum over the row: a few more roundings
    gy, yd = grad_y.detach().double().cpu(), y.detach().double().cpu()
    size = abs(scale) * yd.abs() * (gy.abs() + (gy * yd).abs().sum(dim=-1, keepdim=True))
    err = (got.detach().double().cpu() - want).abs()
    bound = tol["rtol"] * want.abs() + tol["atol"] + eps * size
    bad = ~(err <= bound)
    if bad.any():
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise Fail(
            f"grad_x differs from scale * y * (grad_y - sum(grad_y * y)) in float64 at {int(bad.sum())} of "
            f"{bad.numel()} elements; the first at {list(i)}: {float(got[i])} where {float(want[i])} is right "
            f"(allowed: {float(bound[i]):.3g})"
        )


# --------------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------------

# (shape, padding mask, causal, scale). A padding mask is "random" (a quarter of the keys dropped, and one batch's
# keys all dropped where B > 1), "lengths" (each batch keeps a prefix of keys; one batch none), or None.
_FIXED = [
    ((2, 3, 4, 4), "random", False, 1.0),  # Lq == Lk first: a mask applied to the queries shows here
    ((2, 2, 5, 5), None, True, 1.0),
    ((1, 2, 3, 1), None, True, 0.5),
    ((2, 1, 3, 3), "lengths", True, 0.125),
    ((2, 2, 7, 31), "random", False, 1 / math.sqrt(80)),
    ((1, 2, 33, 32), None, True, 1.0),
    ((2, 1, 3, 33), "random", True, 2.5),
    ((2, 2, 5, 3), "random", True, 1.0),  # Lq > Lk
    ((1, 1, 9, 1000), "lengths", True, 0.125),
    ((1, 2, 3, 1024), "random", False, -0.5),
    ((2, 1, 3, 1025), "lengths", False, 1.0),
    ((1, 2, 5, 2048), "lengths", True, 0.125),  # one block per row, in 16-byte packs
    ((1, 1, 4, 4097), "random", True, 0.0883883),
    ((2, 3, 16392), "random", True, 1.0),  # past a block's registers: the long rows' kernel on a GPU
    ((5, 33), "random", True, 1.0),  # 2-d: each row its own batch
    ((3, 6, 31), "lengths", False, 0.0),  # scale 0: uniform over the kept keys
    ((7,), None, False, 2.0),
    ((0, 2, 3, 4), "random", True, 1.0),
    ((2, 2, 0, 8), "random", True, 1.0),
    ((2, 2, 3, 0), "random", False, 1.0),
]
_SCALES = (1.0, 0.125, 1 / math.sqrt(96), 2.5, -0.5)


def _mask(B: int, Lk: int, kind: str | None, g, device: str, *, strided: bool = False):
    import torch

    if kind is None:
        return None
    if kind == "random":
        m = torch.rand(B, Lk, generator=g) > 0.25
    else:
        lengths = torch.randint(1, max(Lk, 1) + 1, (B,), generator=g)
        m = torch.arange(Lk)[None, :] < lengths[:, None]
    if B > 1:
        m[int(torch.randint(0, B, (1,), generator=g))] = False  # a batch with no key kept: rows of zeros
    if strided:  # every other column of a mask twice as wide
        wide = torch.zeros(B, 2 * Lk, dtype=torch.bool)
        wide[:, ::2] = m
        return wide.to(device)[:, ::2]
    return m.to(device)


def _cases(g, random_count: int = 5):
    """The fixed cases, then random ones: B 1-3, H 1-4, Lq 1-40, Lk 1-1500 (odd more often than not)."""
    import torch

    cases = list(_FIXED)
    for _ in range(random_count):
        B, H, Lq = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((1, 4), (1, 5), (1, 41)))
        Lk = int(torch.randint(1, 1501, (1,), generator=g))
        kind = ("random", "lengths", None)[int(torch.randint(0, 3, (1,), generator=g))]
        causal = bool(torch.randint(0, 2, (1,), generator=g))
        scale = _SCALES[int(torch.randint(0, len(_SCALES), (1,), generator=g))]
        cases.append(((B, H, Lq, Lk), kind, causal, scale))
    return cases


def _describe(shape, kind, causal, scale, dtype=None, layout=None, device=None) -> str:
    mask = f"key_padding_mask {kind}" if kind else "no padding mask"
    parts = [f"x {list(shape)}", mask, f"causal={causal}", f"scale={scale:g}"]
    parts += [p for p in (dtype, layout, f"on {device}" if device else None) if p]
    return ", ".join(parts)


LAYOUTS = ("contiguous", "transposed", "strided", "offset")


# --------------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------------


def check_forward(ctx) -> str:
    """Values against the float64 reference on hidden cases (_FIXED and random ones), each dtype, layouts of x and
    of the mask, every device; large scores; and an input reused with new values (an op that caches fails it)."""
    import torch

    op = torch.ops.course.masked_softmax
    g = ctx.generator("forward")
    n = 0
    for device in ctx.devices:
        for i, (shape, kind, causal, scale) in enumerate(_cases(g)):
            for dtype in DTYPES:
                layout = LAYOUTS[(i + DTYPES.index(dtype)) % len(LAYOUTS)] if len(shape) >= 2 else "contiguous"
                ctx.case(_describe(shape, kind, causal, scale, dtype, layout, device))
                x = _rand(shape, dtype, device, g, layout=layout)
                mask = _mask(shape[0], shape[-1], kind, g, device, strided=i % 3 == 1) if len(shape) >= 2 else None
                before = x.detach().cpu().clone()
                _canary(math.prod(shape), x.dtype, device, g)
                y = op(x, mask, scale, causal)
                if tuple(y.shape) != tuple(shape) or y.dtype != x.dtype or y.device != x.device:
                    raise Fail(
                        f"returned {list(y.shape)} {y.dtype} on {y.device}, expected {list(shape)} {x.dtype} on "
                        f"{x.device}"
                    )
                if y.numel():
                    want = reference(before, mask, scale, causal)
                    _close_y(y, want, before, scale, keep(shape, mask, causal).expand(shape))
                n += 1
        for dtype in ("float32", "float16", "bfloat16"):  # scores of +-3e4 (in float16's range): exp(z) alone
            shape = (2, 2, 6, 40)  # overflows, exp(z - max) does not
            ctx.case(f"large scores: x {list(shape)} in [-3e4, 3e4], {dtype}, causal, on {device}")
            x = (_rand(shape, "float64", "cpu", g, extremes=False) * 1e4).clamp(-3e4, 3e4).to(getattr(torch, dtype))
            mask = _mask(2, 40, "random", g, device)
            y = op(x.to(device), mask, 1.0, True)
            _close_y(y, reference(x, mask, 1.0, True), x, 1.0, keep(shape, mask, True).expand(shape))
            n += 1
        ctx.case(f"one input used twice, its values changed between the calls, on {device}")
        x = _rand((2, 4, 16, 96), "float32", device, g)
        mask = _mask(2, 96, "random", g, device)
        op(x, mask, 0.5, True)
        x.copy_(_rand((2, 4, 16, 96), "float32", device, g))
        want = reference(x, mask, 0.5, True)
        _close_y(op(x, mask, 0.5, True), want, x, 0.5, keep(x.shape, mask, True).expand(x.shape), "y of the 2nd call")
    return f"{n} cases ({len(DTYPES)} dtypes, masks, causal, scales, {len(LAYOUTS)} layouts, on {' and '.join(ctx.devices)})"


def check_inputs_unchanged(ctx) -> str:
    """Forward and backward leave their inputs as they were, bit for bit."""
    import torch

    g = ctx.generator("inputs_unchanged")
    for device in ctx.devices:
        for dtype in ("float32", "bfloat16"):
            ctx.case(f"x [2, 3, 9, 333] {dtype} with a padding mask, causal, on {device}, forward and backward")
            x = _rand((2, 3, 9, 333), dtype, device, g)
            mask = _mask(2, 333, "random", g, device)
            grad_y = _rand((2, 3, 9, 333), dtype, device, g)
            x0, m0, g0 = x.clone(), mask.clone(), grad_y.clone()
            y = torch.ops.course.masked_softmax(x, mask, 0.5, True)
            for name, t, t0 in (("x", x, x0), ("key_padding_mask", mask, m0)):
                if _changed(t, t0):
                    raise Fail(f"forward changed {name}: {_changed(t, t0)} of {t.numel()} values differ afterwards")
            y0 = y.clone()
            torch.ops.course.masked_softmax_backward(grad_y, y, 0.5)
            for name, t, t0 in (("y", y, y0), ("grad_y", grad_y, g0)):
                if _changed(t, t0):
                    raise Fail(f"backward changed {name}: {_changed(t, t0)} of {t.numel()} values differ afterwards")
    return "x, key_padding_mask, y and grad_y bit for bit as they were, after forward and backward"


def _changed(t, t0) -> int:
    """How many elements of t differ from t0 bit for bit (a NaN left as it was is unchanged)."""
    import torch

    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return int((t.view(ints) != t0.view(ints)).sum())


def check_backward(ctx) -> str:
    """gradcheck in float64 (masks, causal, a scale), then every dtype's backward through autograd against
    scale * y * (grad_y - sum(grad_y * y)) in float64 on the op's own y, on hidden shapes and a strided grad_y."""
    import torch
    from torch.autograd.gradcheck import GradcheckError

    op = torch.ops.course.masked_softmax
    g = ctx.generator("backward")
    n = 0
    for device in ctx.devices:
        for shape, kind, causal, scale, layout in (
            ((2, 2, 3, 5), "random", True, 0.7, "contiguous"),
            ((2, 4, 6), None, False, 1.3, "transposed"),
            ((1, 1, 4, 3), "lengths", True, -0.5, "contiguous"),
        ):
            ctx.case("gradcheck, " + _describe(shape, kind, causal, scale, "float64", layout, device))
            x = _rand(shape, "float64", device, g, layout=layout, extremes=False).requires_grad_()
            mask = _mask(shape[0], shape[-1], kind, g, device)
            try:
                torch.autograd.gradcheck(lambda t: op(t, mask, scale, causal), (x,))
            except GradcheckError as e:
                raise Fail("gradcheck: " + "\n".join(str(e).strip().splitlines()[:8])) from None
            except (RuntimeError, NotImplementedError) as e:
                raise Fail(
                    f"gradcheck could not differentiate the op: {type(e).__name__}: {str(e).splitlines()[0]}"
                ) from None
        for i, (shape, kind, causal, scale) in enumerate(
            [
                ((2, 2, 5, 37), "random", True, 0.125),
                ((1, 3, 4, 1000), "lengths", False, 1.0),
                ((2, 1, 2, 4097), "random", True, 0.5),
                ((1, 2, 3, 2048), "lengths", False, 2.0),
                ((1, 1, 2, 16392), "random", True, 1.0),  # the long rows' kernels on a GPU
            ]
            + _cases(g, random_count=2)[-2:]
        ):
            for dtype in DTYPES:
                ctx.case("backward, " + _describe(shape, kind, causal, scale, dtype, None, device))
                x = _rand(shape, dtype, device, g).requires_grad_()
                mask = _mask(shape[0], shape[-1], kind, g, device)
                grad_y = _rand(shape, dtype, device, g, layout="transposed" if i % 2 else "contiguous")
                try:
                    y = op(x, mask, scale, causal)
                except NotImplementedError as e:
                    raise Fail(f"the autograd formula is not written yet: {e}") from None
                if not y.requires_grad:
                    raise Fail("the output does not require grad: register the autograd formula (register_autograd)")
                _canary(x.numel(), x.dtype, device, g)
                y.backward(grad_y)
                if x.grad is None or x.grad.shape != x.shape:
                    raise Fail(f"x.grad is {None if x.grad is None else list(x.grad.shape)}, expected {list(shape)}")
                _close_grad(x.grad, reference_grad(grad_y, y, scale), grad_y, y, scale)
                n += 1
    return f"gradcheck in float64 and {n} gradients ({len(DTYPES)} dtypes) against the formula, on {' and '.join(ctx.devices)}"


def check_saves_only_y(ctx) -> str:
    """What autograd keeps between forward and backward: the output y and nothing else (not x: the gradient needs y
    alone; not the mask: y is 0 where it masks)."""
    import torch

    ctx.case("x [2, 2, 8, 16] float32 on cpu, with a padding mask, causal: the tensors saved for backward")
    g = ctx.generator("saves_only_y")
    x = torch.randn(2, 2, 8, 16).requires_grad_()
    mask = _mask(2, 16, "random", g, "cpu")
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = torch.ops.course.masked_softmax(x, mask, 0.5, True)
    ptr = y.untyped_storage().data_ptr()
    extra = [t for t in saved if t.untyped_storage().data_ptr() != ptr]
    if extra:
        what = ", ".join(f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}" for t in extra)
        raise Fail(f"autograd keeps {len(extra)} tensor(s) besides y ({what}): save the output alone")
    if not saved:
        raise Fail("nothing is saved for backward: backward needs y (is the autograd formula registered?)")
    return f"saves y only ({len(saved)} tensor(s), all the output's memory)"


def check_errors(ctx) -> str:
    """Bad input gets an error that names the argument (a Python exception, never a crash or a result)."""
    import torch

    op, backward = torch.ops.course.masked_softmax, torch.ops.course.masked_softmax_backward

    def x_(d, *shape):
        return torch.randn(*(shape or (2, 3, 4, 5)), device=d)

    def m_(d, *shape, dtype=torch.bool):
        return torch.ones(*(shape or (2, 5)), dtype=dtype, device=d)

    cases = [
        ("x of dtype int32", "x", lambda d: op(torch.ones(2, 4, dtype=torch.int32, device=d), None, 1.0, False)),
        ("x a 0-d tensor", "x", lambda d: op(torch.tensor(1.0, device=d), None, 1.0, False)),
        ("causal=True with a 1-d x", "x", lambda d: op(x_(d, 5), None, 1.0, True)),
        (
            "key_padding_mask of dtype float32",
            "key_padding_mask",
            lambda d: op(x_(d), m_(d, dtype=torch.float32), 1.0, False),
        ),
        (
            "key_padding_mask of dtype uint8",
            "key_padding_mask",
            lambda d: op(x_(d), m_(d, dtype=torch.uint8), 1.0, False),
        ),
        (
            "key_padding_mask [2, 6] for x [2, 3, 4, 5]",
            "key_padding_mask",
            lambda d: op(x_(d), m_(d, 2, 6), 1.0, False),
        ),
        (
            "key_padding_mask [3, 5] for x [2, 3, 4, 5]",
            "key_padding_mask",
            lambda d: op(x_(d), m_(d, 3, 5), 1.0, False),
        ),
        ("key_padding_mask [5] (1-d) for x [2, 3, 4, 5]", "key_padding_mask", lambda d: op(x_(d), m_(d, 5), 1.0, True)),
        (
            "key_padding_mask [2, 3, 4, 5], x's shape",
            "key_padding_mask",
            lambda d: op(x_(d), m_(d, 2, 3, 4, 5), 1.0, False),
        ),
        ("scale NaN", "scale", lambda d: op(x_(d), None, math.nan, False)),
        ("scale inf", "scale", lambda d: op(x_(d), None, math.inf, True)),
        (
            "backward: grad_y [2, 3, 4, 6] for y [2, 3, 4, 5]",
            "grad_y",
            lambda d: backward(x_(d, 2, 3, 4, 6), x_(d), 1.0),
        ),
        (
            "backward: grad_y float64, y float32",
            "grad_y",
            lambda d: backward(x_(d).double(), x_(d), 1.0),
        ),
        (
            "backward: y of dtype int32",
            "y",
            lambda d: backward(x_(d), torch.ones(2, 3, 4, 5, dtype=torch.int32, device=d), 1.0),
        ),
    ]
    if "cuda" in ctx.devices:
        cases += [
            (
                "key_padding_mask on the CPU, x on the GPU",
                "key_padding_mask",
                lambda d: op(x_("cuda"), m_("cpu"), 1.0, False),
            ),
            (
                "backward: grad_y on the CPU, y on the GPU",
                "grad_y",
                lambda d: backward(x_("cpu"), x_("cuda"), 1.0),
            ),
        ]
    n = 0
    for device in ctx.devices:
        for what, name, call in cases:
            ctx.case(f"{what}, on {device}")
            grade.expect_error(what, name, lambda: call(device), device)
            n += 1
    return f"{n} bad inputs, each an error naming the argument"


def check_opcheck(ctx) -> str:
    """torch.library.opcheck on both ops: the schema matches what the kernels do, the fake kernels match the real
    ones (shape, dtype, strides), autograd is registered, the op traces with dynamic shapes."""
    import torch

    g = ctx.generator("opcheck")
    n = 0
    for device in ctx.devices:
        samples = [
            ("masked_softmax", (_rand((2, 3, 4, 5), "float32", device, g), None, 1.0, False)),
            (
                "masked_softmax",
                (
                    _rand((2, 3, 4, 9), "float32", device, g).requires_grad_(),
                    _mask(2, 9, "random", g, device),
                    0.5,
                    True,
                ),
            ),
            (
                "masked_softmax",
                (
                    _rand((3, 7, 33), "bfloat16", device, g, layout="transposed"),
                    _mask(3, 33, "lengths", g, device),
                    0.125,
                    True,
                ),
            ),
            (
                "masked_softmax_backward",
                (_rand((2, 3, 4, 5), "float32", device, g), _rand((2, 3, 4, 5), "float32", device, g), 0.5),
            ),
        ]
        for name, args in samples:
            desc = ", ".join(
                f"{list(a.shape)} {str(a.dtype).replace('torch.', '')}" if isinstance(a, torch.Tensor) else repr(a)
                for a in args
            )
            ctx.case(f"opcheck course::{name}({desc}) on {device}")
            try:
                torch.library.opcheck(getattr(torch.ops.course, name), args)
            except Exception as e:  # noqa: BLE001  (OpCheckError, or what the op raised inside it)
                text = str(e).replace(" (scroll up for stack trace)", "")
                raise Fail("opcheck: " + "\n".join(text.strip().splitlines()[:6])) from None
            _fake_matches(name, args, device)
            n += 1
    return f"{n} samples: schema, fake kernels (and their strides), autograd registration, traced with dynamic shapes"


def _fake_matches(name: str, args, device: str) -> None:
    """The fake kernel's output has the real one's shape, dtype and strides (opcheck compares shapes, not strides)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = getattr(torch.ops.course, name)
    ins = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    real = op(*ins)
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in ins]
    with mode:
        fake = op(*fakes)
    for what, r, f in (("shape", tuple(real.shape), tuple(fake.shape)), ("strides", real.stride(), fake.stride())):
        if r != f:
            raise Fail(
                f"course::{name}'s fake kernel returns {what} {f}, the kernel {r} (on {device}): torch.compile plans "
                "the memory of what follows from the fake's"
            )
    if real.dtype != fake.dtype:
        raise Fail(f"course::{name}'s fake kernel returns {fake.dtype}, the kernel {real.dtype}")


def check_compile(ctx) -> str:
    """torch.compile(fullgraph=True) of a small attention (q @ k^T, the op, @ v), forward and backward, at two
    shapes: the eager values and gradients. On the CPU the tracing only (backend="aot_eager"); on a GPU inductor."""
    import torch

    g = ctx.generator("compile")
    for device in ctx.devices:
        backend = "inductor" if device == "cuda" else "aot_eager"

        def attention(q, k, v, mask):
            p = torch.ops.course.masked_softmax(q @ k.transpose(-1, -2), mask, 0.25, True)
            return (p @ v).square().sum()

        torch._dynamo.reset()
        compiled = torch.compile(attention, fullgraph=True, backend=backend)
        for B, H, L, d in ((2, 2, 8, 16), (1, 3, 19, 16)):
            ctx.case(f"torch.compile(fullgraph=True, backend={backend!r}), attention [{B}, {H}, {L}, {d}], on {device}")
            q, k, v = (
                (_rand((B, H, L, d), "float32", device, g, extremes=False) / 3).requires_grad_() for _ in range(3)
            )
            mask = _mask(B, L, "lengths", g, device)
            try:
                got = compiled(q, k, v, mask)
                got.backward()
            except Exception as e:  # noqa: BLE001  (a graph break or a trace error: its first lines say which)
                raise Fail(
                    f"torch.compile: {type(e).__name__}: " + "\n".join(str(e).strip().splitlines()[:5])
                ) from None
            grads = [t.grad.clone() for t in (q, k, v)]
            for t in (q, k, v):
                t.grad = None
            want = attention(q, k, v, mask)
            want.backward()
            try:
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                for gr, t in zip(grads, (q, k, v)):
                    torch.testing.assert_close(gr, t.grad, rtol=1e-4, atol=1e-4)
            except AssertionError as e:
                raise Fail("compiled and eager differ: " + str(e).strip().splitlines()[0]) from None
    return "fullgraph, forward and backward through q, k and v, two shapes: the eager values and gradients"


def check_stream(ctx) -> str:
    """The op runs on PyTorch's current stream: on a side stream, the input is written after a long sleep and the op
    called right after; an op that launches elsewhere reads the input before it is written. One warm-up call per
    kernel first (a module's first launch waits for the whole device, which would hide the mistake)."""
    import torch

    if "cuda" not in ctx.devices:
        raise Skip("no GPU")
    g = ctx.generator("stream")
    side = torch.cuda.Stream()
    shapes = ((2, 4, 64, 1000), (2, 2, 8, 4096))  # the warp kernel, the block kernel
    for shape in shapes:
        warm = torch.randn(*shape, device="cuda")
        mask = torch.ones(shape[0], shape[-1], dtype=torch.bool, device="cuda")
        with torch.cuda.stream(side):
            y = torch.ops.course.masked_softmax(warm, mask, 1.0, True)
            torch.ops.course.masked_softmax_backward(y, y, 1.0)
    torch.cuda.synchronize()
    for shape in shapes:
        for what in ("forward", "backward"):
            ctx.case(f"{what}, x {list(shape)} float32, on a side stream after torch.cuda._sleep on it")
            src = _rand(shape, "float32", "cuda", g)
            gy_src = _rand(shape, "float32", "cuda", g)
            mask = _mask(shape[0], shape[-1], "random", g, "cuda")
            y_src = torch.ops.course.masked_softmax(src, mask, 0.5, True) if what == "backward" else None
            x, gy = torch.zeros_like(src), torch.zeros_like(gy_src)
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                torch.cuda._sleep(50_000_000)  # tens of milliseconds: far longer than a launch
                x.copy_(src if what == "forward" else y_src)
                gy.copy_(gy_src)
                if what == "forward":
                    out = torch.ops.course.masked_softmax(x, mask, 0.5, True)
                else:
                    out = torch.ops.course.masked_softmax_backward(gy, x, 0.5)
            side.synchronize()
            torch.cuda.synchronize()
            if what == "forward":
                _close_y(out, reference(src, mask, 0.5, True), src, 0.5, keep(shape, mask, True).expand(shape))
            else:
                _close_grad(out, reference_grad(gy_src, y_src, 0.5), gy_src, y_src, 0.5)
    return "forward and backward (warp and block kernels) ordered after earlier work on the current stream"


def _liger():
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except Exception:  # noqa: BLE001  (not installed, or no Triton here)
        return None
    return LigerSoftmaxFunction


def check_speed(ctx) -> str:
    """Forward and forward+backward at an attention layer's shape, B=8, H=16, Lq=1024: Lk=1024 causal with a
    padding mask, and Lk=4096 with a padding mask; bfloat16 and float32; fresh inputs for every timed call. Against
    native (x * scale, masked_fill with -inf, softmax; backward by autograd), torch.compile of it, and Liger-Kernel's
    softmax (it has no mask: timed on the same scores unmasked). As % of a copy of the fewest bytes: forward reads x
    up to each row's causal limit (the keys past the diagonal cannot change y) and writes y; backward reads y and
    grad_y and writes grad_x. A time well below the copy's (IMPOSSIBLE_PCT) is impossible and fails the check."""
    import torch

    from .. import bench

    if "cuda" not in ctx.devices:
        raise Skip("no GPU: timings need one")
    B, H, Lq = 8, 16, 1024
    liger = _liger()
    lines, impossible = [], []

    def native(x, dropped, scale):
        return torch.softmax((x * scale).masked_fill(dropped, float("-inf")), dim=-1)

    for Lk, causal in ((1024, True), (4096, False)):
        for dtype in (torch.bfloat16, torch.float32):
            name = str(dtype).replace("torch.", "")
            n, esize = B * H * Lq * Lk, torch.empty((), dtype=dtype).element_size()
            free, _ = torch.cuda.mem_get_info()
            need = 14 * n * esize  # 3 x, 3 grad_y, y, grad_x and native's intermediates
            if free < need:
                lines.append(f"Lk={Lk} {name}: skipped ({need / 2**30:.0f} GiB of free GPU memory needed)")
                continue
            gen = torch.Generator(device="cuda").manual_seed(ctx.seed)
            xs = [torch.randn(B, H, Lq, Lk, dtype=dtype, device="cuda", generator=gen) for _ in range(3)]
            gys = [torch.randn(B, H, Lq, Lk, dtype=dtype, device="cuda", generator=gen) for _ in range(3)]
            lengths = torch.randint(Lk // 2, Lk + 1, (B,), device="cuda", generator=gen)
            pad = torch.arange(Lk, device="cuda")[None, :] < lengths[:, None]
            kept = pad[:, None, None, :]
            if causal:
                kept = kept & torch.ones(Lq, Lk, dtype=torch.bool, device="cuda").tril()
            dropped = ~kept  # built once, as a model builds its attention mask once for all its layers
            scale = 1 / math.sqrt(128)
            torch._dynamo.reset()
            compiled = torch.compile(native)
            k = [0]

            def fresh():  # each timed call takes the next of 3 inputs: a result cached by input cannot be replayed
                k[0] = (k[0] + 1) % 3
                return k[0]

            ours = lambda x: torch.ops.course.masked_softmax(x, pad, scale, causal)  # noqa: E731
            theirs = {
                "native": lambda x: native(x, dropped, scale),
                "torch.compile": lambda x: compiled(x, dropped, scale),
            }
            if liger:
                theirs["Liger-Kernel (no mask)"] = liger.apply
            reads = B * H * sum(min(i + 1, Lk) for i in range(Lq)) if causal else n
            for what, nbytes in (("forward", (reads + n) * esize), ("forward+backward", (reads + 4 * n) * esize)):

                def wrap(fn, what=what):
                    if what == "forward":
                        return lambda: fn(xs[fresh()])

                    def run():
                        i = fresh()
                        fn(xs[i].detach().requires_grad_()).backward(gys[i])

                    return run

                ctx.case(f"{what}, x [{B}, {H}, {Lq}, {Lk}] {name}, causal={causal}, padding mask")
                fns = {"yours": wrap(ours), **{impl: wrap(fn) for impl, fn in theirs.items()}}
                res = {r["impl"]: r for r in bench.compare(fns, nbytes=nbytes, device="cuda")}
                mine = res["yours"]
                lines.append(
                    f"{what:<16} Lk={Lk:<5} {name:<8} {mine['ms']:.3f} ms, {mine['pct_copy']:.0f} % of a copy; "
                    + ", ".join(f"{impl} {r['ms'] / mine['ms']:.2f}x" for impl, r in res.items() if impl != "yours")
                )
                if mine["pct_copy"] > IMPOSSIBLE_PCT:
                    impossible.append(f"{what} Lk={Lk} {name}: {mine['pct_copy']:.0f} % of a copy of the same bytes")
            xs.clear()  # free them before the next case's
            gys.clear()
            torch.cuda.empty_cache()
    text = (
        "times as ratios: theirs / yours (above 1: yours is faster); targets: 85 % of a copy, 0.97x torch.compile\n"
        + "\n".join(lines)
    )
    if impossible:
        raise Fail(
            "impossible: faster than a copy of the bytes the op must move (is work skipped, cached, or on another "
            "stream?):\n" + "\n".join(impossible) + "\n" + text
        )
    return text


# --------------------------------------------------------------------------------------------------
# The corpus: wrong answers the checks above must reject
# --------------------------------------------------------------------------------------------------

_EXP = "z[j] = std::exp(z[j] - m);  // a masked key: exp(-inf) = 0"
_SCORE = "z[j] = j < limit && (keep == nullptr || keep[j]) ? c * static_cast<A>(xr[j]) : kMasked;"
_STORE = "for (int64_t j = 0; j < s.Lk; ++j) yr[j] = static_cast<T>(z[j] * inv);"
_GRAD = "gx[j] = static_cast<T>(c * static_cast<A>(yr[j]) * (static_cast<A>(gy[j]) - dot));"

CORPUS = [
    E(
        "no_max_subtraction",
        "exp(z) instead of exp(z - max): scores above 88 overflow float to inf, and inf / inf is NaN",
        "forward",
        "cpu",
        ("masked_softmax.cpu.cpp", _EXP, "z[j] = std::exp(z[j]);"),
    ),
    E(
        "scale_after_the_softmax",
        "softmax(x) * scale: the scale multiplies the probabilities instead of the scores",
        "forward",
        "cpu",
        ("masked_softmax.cpu.cpp", _SCORE, _SCORE.replace("c * static_cast<A>(xr[j])", "static_cast<A>(xr[j])")),
        ("masked_softmax.cpu.cpp", _STORE, _STORE.replace("z[j] * inv", "c * z[j] * inv")),
    ),
    E(
        "causal_masks_the_diagonal",
        "causal keeps keys j < i, not j <= i: a query no longer sees its own key (and query 0 sees nothing)",
        "forward",
        "cpu",
        ("masked_softmax_math.h", "limit = i + 1 < s.Lk ? i + 1 : s.Lk;", "limit = i < s.Lk ? i : s.Lk;"),
    ),
    E(
        "padding_mask_on_the_queries",
        "key_padding_mask indexed by the query i instead of the key j: whole rows dropped instead of columns",
        "forward",
        "cpu",
        ("masked_softmax.cpu.cpp", _SCORE, _SCORE.replace("keep[j]", "keep[r % s.Lq]")),
    ),
    E(
        "all_masked_row_gives_nan",
        "no guard for a row with no key kept: max = -inf, and exp(-inf - -inf) is NaN where zeros are right",
        "forward",
        "cpu",
        (
            "masked_softmax.cpu.cpp",
            "    if (m == kMasked) m = 0;  // no key kept: exp(-inf - 0) = 0 below, where exp(-inf - -inf) would be NaN\n",
            "",
        ),
    ),
    E(
        "backward_without_the_sum",
        "grad_x = scale * y * grad_y: the sum_j grad_y[j] * y[j] term (the normalization's derivative) forgotten",
        "backward",
        "cpu",
        ("masked_softmax.cpu.cpp", _GRAD, _GRAD.replace(" - dot", "")),
    ),
    E(
        "backward_without_the_scale",
        "grad_x = y * (grad_y - dot): the chain rule through scale * x dropped",
        "backward",
        "cpu",
        ("masked_softmax.cpu.cpp", _GRAD, _GRAD.replace("c * static_cast<A>(yr[j])", "static_cast<A>(yr[j])")),
    ),
    E(
        "saves_x_too",
        "saves x beside y for backward: a tensor of the scores' size kept alive that the gradient never reads",
        "saves_only_y",
        "cpu",
        ("masked_softmax.py", "ctx.save_for_backward(output)", "ctx.save_for_backward(output, x)"),
        ("masked_softmax.py", "(y,) = ctx.saved_tensors", "y, _ = ctx.saved_tensors"),
    ),
    E(
        "caches_outputs_by_input",
        "remembers the last x's address and shape and returns the last y for it without computing",
        "forward",
        "cpu",
        (
            "masked_softmax.cpp",
            "  at::Tensor y = at::empty(x.sizes(), x.options());\n  if (y.numel() == 0) return y;",
            "  static const void* seen = nullptr;\n  static at::Tensor memo;\n"
            "  if (x.data_ptr() == seen && memo.defined() && memo.sizes() == x.sizes() && memo.dtype() == x.dtype())\n"
            "    return memo.clone();\n"
            "  at::Tensor y = at::empty(x.sizes(), x.options());\n  if (y.numel() == 0) return y;",
        ),
        (
            "masked_softmax.cpp",
            "#endif\n  });\n  return y;\n}\n\nat::Tensor masked_softmax_backward_kernel",
            "#endif\n  });\n  seen = x.data_ptr();\n  memo = y.clone();\n  return y;\n}\n\n"
            "at::Tensor masked_softmax_backward_kernel",
        ),
    ),
    E(
        "cuda_warp_max_of_half_a_warp",
        "the warp's max without its first shuffle (offset 16): each half of the warp subtracts its own max, so the "
        "halves' exponentials are added on two different scales",
        "forward",
        "cuda",
        (
            "masked_softmax.cu",
            "  for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));",
            "  for (int offset = 8; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));",
        ),
    ),
    E(
        "cuda_causal_tail_unwritten",
        "the warp kernel stores y only up to the causal limit: the masked tail keeps whatever the memory held",
        "forward",
        "cuda",
        (
            "masked_softmax.cu",
            "      const int p = k * 32 + lane;\n      if (p * N >= s.Lk) break;",
            "      const int p = k * 32 + lane;\n      if (p * N >= limit) break;",
        ),
    ),
    E(
        "cuda_legacy_default_stream",
        "the warp kernels launched on the legacy default stream, not PyTorch's current one",
        "stream",
        "cuda",
        (
            "masked_softmax.cu",
            "masked_softmax_warp_kernel<T, N, 32 / N><<<grid, kWarpRows * 32, 0, stream>>>(x, y, s, c);",
            "masked_softmax_warp_kernel<T, N, 32 / N><<<grid, kWarpRows * 32, 0, 0>>>(x, y, s, c);",
        ),
    ),
]
