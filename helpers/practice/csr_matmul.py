"""The grader's spec for course::csr_matmul (lesson 09's practice set): sparse (CSR) times dense, Y = A @ B, with
the gradient for B. helpers/grade.py runs these checks in a child process (`python -m helpers.grade csr_matmul`).

What a case is here: A drawn from the seed as row lengths (random, with empty rows, none at all, one row holding
most nonzeros, a power law), sorted random columns and N(0, 1) values; B in one of the layouts of grade._rand
(contiguous, transposed, strided, offset by one element); every dtype the op claims (float32, float64), every
device, and on the GPU every kernel of the op (variant="auto", "warp_per_row", "balanced"). The reference is
float64, from a copy of the inputs made before the call; a long row's sum in float32 is allowed the error its
float adds make (a multiple of 2^-24 times the sum of the terms' sizes), on top of the dtype's tolerance.
"""

from __future__ import annotations

import math

from .. import grade
from ..grade import IMPOSSIBLE_PCT, TOLERANCES, Fail, Skip, _canary, _rand
from ..grade_corpus import E

NAME = "csr_matmul"
SCHEMAS = {
    "course::csr_matmul": (
        "course::csr_matmul(Tensor crow_indices, Tensor col_indices, Tensor values, Tensor dense, int n_cols_A, "
        'str variant="auto") -> Tensor'
    ),
    "course::csr_matmul_backward": (
        "course::csr_matmul_backward(Tensor crow_indices, Tensor col_indices, Tensor values, Tensor grad_y, int k, "
        'str variant="auto") -> Tensor'
    ),
}
CHECKS = [
    "build",
    "registered",
    "forward",
    "inputs_unchanged",
    "backward",
    "skewed",
    "errors",
    "opcheck",
    "compile",
    "stream",
    "large",
    "speed",
    "integrity",
]
TASK = (
    "Y = A @ B for a sparse A in CSR (crow_indices, col_indices, values) and a dense B ([K, N], or [K] for a "
    "vector), and B's gradient A^T @ grad_Y. Write the CPU row loop and the transpose that backward runs it on "
    "(csr_matmul.cpu.cpp), the CUDA kernels' work on a row (a warp's dot product for N = 1, lanes over columns for "
    "N > 1) and the two ways to hand rows to warps: one warp per row, and balanced shares of rows' ends and "
    "nonzeros with a carry for the row a share leaves unfinished (csr_matmul.cu), and the autograd formula "
    "(csr_matmul.py). The checks of the input, the index checks on the GPU, the partition's binary search, the "
    "carries' fix-up and the backward kernels are given."
)
LINES = 77
HINTS = {
    "forward": "every row of Y is written, an empty one with zeros; row i's nonzeros are crow[i] .. crow[i+1] - 1 "
    "(the end excluded); B's row for nonzero k is col[k]; in the balanced kernel a share's first nonzero is "
    "w * items - part[w] and its last row (part[w + 1]) goes to carry[w], not to y",
    "inputs_unchanged": "the kernels and loops read A, B and grad_y through const pointers and write only their output",
    "backward": "grad_B = A^T @ grad_Y: nonzero (i, j, v) adds v * grad_Y[i, :] to grad_B[j, :]; setup_context "
    "saves crow_indices, col_indices and values (not B), backward returns a gradient for dense alone (None for "
    "the others)",
    "skewed": "a row longer than a share spans several warps: each stores its part as a carry, and the fix-up adds "
    "them to the row that the last warp stored",
    "errors": "the glue's checks name the argument; on the GPU a bad column must be skipped by the kernel (a read "
    "outside B crashes) and reported by the flag",
    "opcheck": "the fake kernels: a new tensor of the kernel's output shape ([M] for a 1-D dense, [M, N] for 2-D)",
    "compile": "call the ops through torch.ops.course in backward; the fake kernels' shapes must match the kernels'",
    "stream": "every launch on the stream the launcher is given",
    "large": "offsets into B and Y in int64: col * n passes 2^31 when B holds more than 2^31 values",
}

DTYPES = ("float32", "float64")
KERNELS = ("auto", "warp_per_row", "balanced")
LAYOUTS = ("contiguous", "transposed", "strided", "offset")
# (M, K, N, row lengths): N None is a 1-D B of K values (the matrix-vector case)
FIXED = [
    (5, 7, 3, "random"),
    (1, 1, 1, "random"),
    (0, 4, 3, "random"),  # no rows
    (6, 5, 4, "none"),  # no nonzeros: Y is zeros
    (8, 6, 0, "random"),  # N = 0
    (9, 11, 1, "random"),  # N = 1, B 2-D
    (9, 11, None, "random"),  # B 1-D
    (40, 30, 70, "random"),  # wide B, N odd
    (33, 50, 64, "empty rows"),
    (50, 40, 128, "skewed"),
    (70, 20, None, "skewed"),
    (3, 0, 5, "none"),  # K = 0
    (300, 200, 33, "power law"),
]


def _kernels(device: str) -> tuple[str, ...]:
    return KERNELS if device == "cuda" else ("auto",)


def _dtype(name):
    import torch

    return getattr(torch, name) if isinstance(name, str) else name


def _lengths(m: int, kind: str, g, long_row: int = 0):
    """Row lengths of an M-row matrix: random (0..8), empty rows (half of them), none, skewed (0..4 and one row
    of long_row, default 40 * M), or a power law (0..6 plus 10 * M / rank for the rows ranked 1, 2, ...)."""
    import torch

    if kind == "none" or m == 0:
        return torch.zeros(m, dtype=torch.long)
    if kind == "empty rows":
        return torch.randint(0, 9, (m,), generator=g) * torch.randint(0, 2, (m,), generator=g)
    if kind == "skewed":
        out = torch.randint(0, 5, (m,), generator=g)
        out[int(torch.randint(0, m, (1,), generator=g))] = long_row or 40 * m
        return out
    if kind == "power law":
        rank = torch.randperm(m, generator=g) + 1
        return torch.randint(0, 7, (m,), generator=g) + (10 * m / rank).long()
    return torch.randint(0, 9, (m,), generator=g)


def _csr(lengths, k: int, dtype, device: str, g):
    """(crow_indices, col_indices, values) on `device`: the row lengths given, columns uniform in [0, K) and sorted
    within each row (repeats allowed: they add), values N(0, 1). With K = 0 every row is empty."""
    import torch

    if k == 0:
        lengths = torch.zeros_like(lengths)
    m = lengths.numel()
    crow = torch.zeros(m + 1, dtype=torch.long)
    crow[1:] = lengths.cumsum(0)
    nnz = int(crow[-1])
    rows = torch.repeat_interleave(torch.arange(m), lengths)
    cols = torch.randint(0, max(k, 1), (nnz,), generator=g)
    cols = (rows * max(k, 1) + cols).sort().values % max(k, 1)
    values = torch.randn(nnz, generator=g, dtype=torch.float64).to(_dtype(dtype))
    return crow.to(device), cols.to(device), values.to(device)


def _reference(crow, col, values, b):
    """A @ b in float64 on the CPU, and |A| @ |b| (the size of the terms each result sums)."""
    import torch

    crow, col, values, b = crow.cpu(), col.cpu(), values.double().cpu(), b.double().cpu()
    m = crow.numel() - 1
    b2 = b.unsqueeze(1) if b.dim() == 1 else b
    rows = torch.repeat_interleave(torch.arange(m), crow.diff())
    want = torch.zeros(m, b2.shape[1], dtype=torch.float64).index_add_(0, rows, values[:, None] * b2[col])
    size = torch.zeros_like(want).index_add_(0, rows, values.abs()[:, None] * b2[col].abs())
    return (want.squeeze(1), size.squeeze(1)) if b.dim() == 1 else (want, size)


def _reference_grad(crow, col, values, grad_y, k: int):
    """A^T @ grad_y in float64 on the CPU, and |A|^T @ |grad_y|."""
    import torch

    crow, col, values, gy = crow.cpu(), col.cpu(), values.double().cpu(), grad_y.double().cpu()
    m = crow.numel() - 1
    g2 = gy.unsqueeze(1) if gy.dim() == 1 else gy
    rows = torch.repeat_interleave(torch.arange(m), crow.diff())
    want = torch.zeros(k, g2.shape[1], dtype=torch.float64).index_add_(0, col, values[:, None] * g2[rows])
    size = torch.zeros_like(want).index_add_(0, col, values.abs()[:, None] * g2[rows].abs())
    return (want.squeeze(1), size.squeeze(1)) if gy.dim() == 1 else (want, size)


def _close(got, want, size, what: str) -> None:
    """got against the float64 reference: the dtype's tolerance, plus 32 roundings of the sum of the terms' sizes
    (a row of 10^5 float32 terms adds that much error in any order of adds; a term left out is far more)."""
    import torch

    tol = TOLERANCES[str(got.dtype)]
    unit = 2.0**-53 if got.dtype == torch.float64 else 2.0**-24
    err = (got.detach().double().cpu() - want).abs()
    bound = tol["rtol"] * want.abs() + tol["atol"] + 32 * unit * size
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise Fail(
            f"{what} differs from the float64 reference at {int(bad.sum())} of {bad.numel()} values; the first at "
            f"{list(i)}: {float(got.detach().cpu()[i])} where {float(want[i])} is right (allowed: {float(bound[i]):.3g})"
        )


def _dense(k: int, n, dtype, device: str, g, layout: str):
    shape = (k,) if n is None else (k, n)
    if n is None and layout == "transposed":
        layout = "strided"
    return _rand(shape, dtype, device, g, layout=layout, extremes=False)


def _describe(m, k, n, kind, dtype, layout, device, kernel) -> str:
    b = f"B [{k}]" if n is None else f"B [{k}, {n}]"
    return f"A {m}x{k} ({kind} rows), {b} {layout}, {dtype}, variant={kernel!r}, on {device}"


def _cases(g, random_count: int = 4):
    import torch

    out = list(FIXED)
    kinds = ("random", "empty rows", "skewed", "power law")
    for _ in range(random_count):
        m = int(torch.randint(1, 400, (1,), generator=g))
        k = int(torch.randint(1, 300, (1,), generator=g))
        pick = int(torch.randint(0, 3, (1,), generator=g))
        n = (None, 1, int(torch.randint(2, 200, (1,), generator=g)))[pick]
        out.append((m, k, n, kinds[int(torch.randint(0, len(kinds), (1,), generator=g))]))
    return out


def check_forward(ctx) -> str:
    """Y against the float64 reference on hidden cases: the shapes of FIXED (no rows, no nonzeros, N = 0, N = 1,
    a 1-D B, a wide B, empty rows, skewed rows, K = 0) and random ones, each layout of B, both dtypes, every
    device and kernel; the output's memory filled with junk first; and an input reused with new values."""
    import torch

    g = ctx.generator("forward")
    op = torch.ops.course.csr_matmul
    n_cases = 0
    for device in ctx.devices:
        for i, (m, k, n, kind) in enumerate(_cases(g)):
            lengths = _lengths(m, kind, g)
            for d, dtype in enumerate(DTYPES):
                crow, col, values = _csr(lengths, k, dtype, device, g)
                for j, kernel in enumerate(_kernels(device)):
                    layout = LAYOUTS[(i + d + j) % len(LAYOUTS)]
                    b = _dense(k, n, dtype, device, g, layout)
                    ctx.case(_describe(m, k, n, kind, dtype, layout, device, kernel))
                    before = [t.detach().cpu().clone() for t in (crow, col, values, b)]
                    want_shape = (m,) if n is None else (m, n)
                    _canary(math.prod(want_shape), _dtype(dtype), device, g)
                    y = op(crow, col, values, b, k, kernel)
                    if tuple(y.shape) != want_shape or y.dtype != b.dtype or y.device != b.device:
                        raise Fail(
                            f"returned {list(y.shape)} {y.dtype} on {y.device}, expected {list(want_shape)} "
                            f"{b.dtype} on {b.device}"
                        )
                    _close(y, *_reference(*before), "Y")
                    n_cases += 1
        ctx.case(f"one A and B used twice, their values changed between the calls, on {device}")
        crow, col, values = _csr(_lengths(64, "random", g), 48, "float32", device, g)
        b = _dense(48, 96, "float32", device, g, "contiguous")
        op(crow, col, values, b, 48)
        values.copy_(torch.randn(values.shape, generator=g).to(device))
        b.copy_(torch.randn(b.shape, generator=g).to(device))
        _close(op(crow, col, values, b, 48), *_reference(crow, col, values, b), "Y of the second call")
    kernels = " and ".join(f"{d} ({len(_kernels(d))} kernel(s))" for d in ctx.devices)
    return f"{n_cases} cases (2 dtypes, {len(LAYOUTS)} layouts of B, on {kernels}) and a reused input"


def check_inputs_unchanged(ctx) -> str:
    """Forward and backward leave crow_indices, col_indices, values, dense and grad_y as they were, bit for bit."""
    import torch

    g = ctx.generator("inputs_unchanged")
    for device in ctx.devices:
        for kernel in _kernels(device):
            ctx.case(f"A 37x29 (skewed rows), B [29, 40], float32, variant={kernel!r}, on {device}")
            crow, col, values = _csr(_lengths(37, "skewed", g), 29, "float32", device, g)
            b = _dense(29, 40, "float32", device, g, "contiguous")
            grad_y = _dense(37, 40, "float32", device, g, "contiguous")
            saved = [t.clone() for t in (crow, col, values, b, grad_y)]
            torch.ops.course.csr_matmul(crow, col, values, b, 29, kernel)
            torch.ops.course.csr_matmul_backward(crow, col, values, grad_y, 29, kernel)
            names = ("crow_indices", "col_indices", "values", "dense", "grad_y")
            for name, t, t0 in zip(names, (crow, col, values, b, grad_y), saved):
                if not torch.equal(t, t0):
                    raise Fail(
                        f"{name} changed: {int((t != t0).sum())} of {t.numel()} values differ after forward and backward"
                    )
    return "crow_indices, col_indices, values, dense and grad_y bit for bit as they were"


BACKWARD_CASES = [(5, 7, 3, "random"), (9, 11, None, "random"), (33, 50, 64, "empty rows"), (6, 5, 4, "none")]
BACKWARD_CASES += [(50, 40, 128, "skewed"), (0, 4, 3, "random"), (3, 0, 5, "none"), (120, 90, 33, "power law")]


def check_backward(ctx) -> str:
    """gradcheck in float64 (B's gradient; a small tolerance for repeated runs on the GPU, whose atomic adds come in
    any order), then B.grad through autograd on hidden cases, both dtypes, every kernel, against A^T @ grad_Y in
    float64, the gradient's memory filled with junk first."""
    import torch
    from torch.autograd.gradcheck import GradcheckError

    g = ctx.generator("backward")
    op = torch.ops.course.csr_matmul
    n_cases = 0
    for device in ctx.devices:
        nondet = 1e-12 if device == "cuda" else 0.0
        for m, k, n, kind in ((5, 4, 3, "random"), (6, 5, None, "empty rows"), (4, 6, 2, "skewed")):
            for kernel in _kernels(device):
                layout = "transposed" if n else "contiguous"
                ctx.case("gradcheck, " + _describe(m, k, n, kind, "float64", layout, device, kernel))
                crow, col, values = _csr(_lengths(m, kind, g, long_row=12), k, "float64", device, g)
                b = _dense(k, n, "float64", device, g, layout).requires_grad_()
                try:
                    torch.autograd.gradcheck(
                        lambda b_: op(crow, col, values, b_, k, kernel), (b,), nondet_tol=nondet, fast_mode=False
                    )
                except GradcheckError as e:
                    raise Fail("gradcheck: " + "\n".join(str(e).strip().splitlines()[:8])) from None
                except (RuntimeError, NotImplementedError) as e:
                    raise Fail(f"gradcheck could not differentiate the op: {type(e).__name__}: {e}") from None
        for i, (m, k, n, kind) in enumerate(BACKWARD_CASES + _cases(g, random_count=2)[len(FIXED) :]):
            lengths = _lengths(m, kind, g)
            for dtype in DTYPES:
                crow, col, values = _csr(lengths, k, dtype, device, g)
                for kernel in _kernels(device):
                    ctx.case("backward, " + _describe(m, k, n, kind, dtype, "contiguous", device, kernel))
                    b = _dense(k, n, dtype, device, g, "contiguous").requires_grad_()
                    grad_y = _dense(m, n, dtype, device, g, "transposed" if i % 2 else "contiguous")
                    y = op(crow, col, values, b, k, kernel)
                    if not y.requires_grad:
                        raise Fail(
                            "the output does not require grad: register the autograd formula (register_autograd)"
                        )
                    _canary(b.numel(), b.dtype, device, g)
                    y.backward(grad_y)
                    if b.grad is None:
                        raise Fail("B.grad is None after backward: the formula must return dense's gradient (4th)")
                    if tuple(b.grad.shape) != tuple(b.shape):
                        raise Fail(f"B.grad has shape {list(b.grad.shape)}, B {list(b.shape)}")
                    _close(b.grad, *_reference_grad(crow, col, values, grad_y, k), "B.grad")
                    n_cases += 1
    return f"gradcheck in float64 and {n_cases} gradients of B against A^T @ grad_Y, on {' and '.join(ctx.devices)}"


def check_skewed(ctx) -> str:
    """A power-law matrix, one row holding most nonzeros (40,000 of them on the CPU; 300,000 and three rows of
    20,000 on the GPU): Y and B's gradient right, N = 1 (a vector) and a wide B, every kernel. The balanced
    kernels split such a row over many warps: its parts must all arrive, once each."""
    import torch

    g = ctx.generator("skewed")
    op = torch.ops.course.csr_matmul
    n_cases = 0
    for device in ctx.devices:
        m = k = 2048 if device == "cpu" else 8192
        lengths = _lengths(m, "skewed", g, long_row=40_000 if device == "cpu" else 300_000)
        if device == "cuda":
            lengths[torch.randperm(m, generator=g)[:3]] = 20_000
        nnz = int(lengths.sum())
        for n, dtypes in ((None, DTYPES), (16 if device == "cpu" else 64, ("float32",))):
            for dtype in dtypes:
                crow, col, values = _csr(lengths, k, dtype, device, g)
                b = _dense(k, n, dtype, device, g, "contiguous")
                grad_y = _dense(m, n, dtype, device, g, "contiguous")
                want = _reference(crow, col, values, b)
                want_grad = _reference_grad(crow, col, values, grad_y, k)
                for kernel in _kernels(device):
                    what = f"A {m}x{k} with {nnz} nonzeros, {int(lengths.max())} in one row"
                    ctx.case(f"{what}, B {list(b.shape)} {dtype}, variant={kernel!r}, on {device}")
                    _canary(m * (n or 1), _dtype(dtype), device, g)
                    _close(op(crow, col, values, b, k, kernel), *want, "Y")
                    ctx.case(f"backward: {what}, grad_Y {list(grad_y.shape)} {dtype}, variant={kernel!r}, on {device}")
                    _canary(k * (n or 1), _dtype(dtype), device, g)
                    got = torch.ops.course.csr_matmul_backward(crow, col, values, grad_y, k, kernel)
                    _close(got, *want_grad, "grad_dense")
                    n_cases += 1
    return f"{n_cases} skewed cases, forward and backward, on {' and '.join(ctx.devices)}"


def _bad_inputs(device: str):
    """(what, the argument the error must name, a call) for each bad input."""
    import torch

    op, backward = torch.ops.course.csr_matmul, torch.ops.course.csr_matmul_backward

    def t(values, dtype=torch.long):
        return torch.tensor(values, dtype=dtype, device=device)

    crow, col = t([0, 2, 3, 3, 5]), t([0, 2, 1, 3, 0])
    values = torch.randn(5, device=device)
    b = torch.randn(4, 3, device=device)
    gy = torch.randn(4, 3, device=device)
    cases = [
        ("crow_indices decreasing, [0, 3, 2, 3, 5]", "crow_indices", lambda: op(t([0, 3, 2, 3, 5]), col, values, b, 4)),
        ("crow_indices starting at 1", "crow_indices", lambda: op(t([1, 2, 3, 3, 5]), col, values, b, 4)),
        ("crow_indices ending at 4 with 5 nonzeros", "crow_indices", lambda: op(t([0, 2, 3, 3, 4]), col, values, b, 4)),
        ("col_indices holding 4 with K = 4", "col_indices", lambda: op(crow, t([0, 2, 4, 3, 0]), values, b, 4)),
        ("col_indices holding -1", "col_indices", lambda: op(crow, t([0, -1, 1, 3, 0]), values, b, 4)),
        (
            "col_indices out of range, B with N = 0",
            "col_indices",
            lambda: op(crow, t([0, 9, 1, 3, 0]), values, b[:, :0], 4),
        ),
        ("values of 4 entries, col_indices of 5", "values", lambda: op(crow, col, values[:4], b, 4)),
        ("crow_indices int32", "crow_indices", lambda: op(crow.int(), col, values, b, 4)),
        ("col_indices float32", "col_indices", lambda: op(crow, col.float(), values, b, 4)),
        ("values float16", "values", lambda: op(crow, col, values.half(), b.half(), 4)),
        ("values int64", "values", lambda: op(crow, col, col, b, 4)),
        ("dense float64, values float32", "dense", lambda: op(crow, col, values, b.double(), 4)),
        ("dense of 5 rows, n_cols_A = 4", "dense", lambda: op(crow, col, values, torch.randn(5, 3, device=device), 4)),
        ("dense 3-D", "dense", lambda: op(crow, col, values, b[None], 4)),
        ("crow_indices 2-D", "crow_indices", lambda: op(crow[None], col, values, b, 4)),
        ("crow_indices empty", "crow_indices", lambda: op(crow[:0], col, values, b, 4)),
        ("n_cols_A = -1", "n_cols_A", lambda: op(crow, col, values, b[:0], -1)),
        ("variant='fastest'", "variant", lambda: op(crow, col, values, b, 4, "fastest")),
        ("backward: grad_y of 3 rows for M = 4", "grad_y", lambda: backward(crow, col, values, gy[:3], 4)),
        ("backward: grad_y float64", "grad_y", lambda: backward(crow, col, values, gy.double(), 4)),
        (
            "backward: col_indices holding 7 with k = 4",
            "col_indices",
            lambda: backward(crow, t([0, 2, 7, 3, 0]), values, gy, 4),
        ),
        (
            "values requiring grad, through autograd",
            "values",
            lambda: op(crow, col, values.clone().requires_grad_(), b.clone().requires_grad_(), 4),
        ),
    ]
    if device == "cuda":
        cases.append(("dense on the CPU, A on the GPU", "dense", lambda: op(crow, col, values, b.cpu(), 4)))
    return cases


def check_errors(ctx) -> str:
    """Bad input gets an error that names the argument (a Python exception, never a crash or a result): A's indices
    too, on the GPU (a column outside B skipped by the kernels and reported after them)."""

    n = 0
    for device in ctx.devices:
        for what, name, call in _bad_inputs(device):
            ctx.case(f"{what}, on {device}")
            grade.expect_error(what, name, call, device)
            n += 1
    return f"{n} bad inputs, each an error naming the argument"


def check_opcheck(ctx) -> str:
    """torch.library.opcheck on both ops (schema, fake kernels, autograd registration, tracing with dynamic shapes),
    and the fake kernels' strides against the kernels'."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = ctx.generator("opcheck")
    n = 0
    for device in ctx.devices:
        crow, col, values = _csr(_lengths(6, "empty rows", g), 5, "float32", device, g)
        c64, i64, v64 = _csr(_lengths(7, "skewed", g, long_row=30), 9, "float64", device, g)
        samples = [
            ("csr_matmul", (crow, col, values, _dense(5, 4, "float32", device, g, "contiguous"), 5)),
            ("csr_matmul", (crow, col, values, _dense(5, None, "float32", device, g, "contiguous"), 5)),
            ("csr_matmul", (crow, col, values, _dense(5, 3, "float32", device, g, "contiguous").requires_grad_(), 5)),
            ("csr_matmul", (c64, i64, v64, _dense(9, 70, "float64", device, g, "transposed"), 9, "balanced")),
            ("csr_matmul_backward", (crow, col, values, _dense(6, 4, "float32", device, g, "contiguous"), 5)),
            ("csr_matmul_backward", (c64, i64, v64, _dense(7, None, "float64", device, g, "contiguous"), 9)),
        ]
        for name, args in samples:
            desc = ", ".join(
                f"{list(a.shape)} {str(a.dtype).replace('torch.', '')}" if isinstance(a, torch.Tensor) else repr(a)
                for a in args
            )
            ctx.case(f"opcheck course::{name}({desc}) on {device}")
            op = getattr(torch.ops.course, name)
            try:
                torch.library.opcheck(op, args)
            except Exception as e:  # noqa: BLE001  (OpCheckError, or what the op raised inside it)
                text = str(e).replace(" (scroll up for stack trace)", "")
                raise Fail("opcheck: " + "\n".join(text.strip().splitlines()[:6])) from None
            plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
            real = op(*plain)
            mode = FakeTensorMode()
            fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in plain]
            with mode:
                fake = op(*fakes)
            for what, r, f in (
                ("shape", tuple(real.shape), tuple(fake.shape)),
                ("strides", real.stride(), fake.stride()),
            ):
                if r != f:
                    raise Fail(f"course::{name}'s fake kernel returns {what} {f}, the kernel {r} (on {device})")
            if real.dtype != fake.dtype:
                raise Fail(f"course::{name}'s fake kernel returns {fake.dtype}, the kernel {real.dtype}")
            n += 1
    return f"{n} samples: schema, fake kernels (shape, dtype, strides), autograd registration, dynamic shapes"


def check_compile(ctx) -> str:
    """torch.compile(fullgraph=True) of a function that uses the op (A @ (x @ w)), forward and backward, at three
    shapes (the later ones dynamic): eager's values and gradients. On the CPU the tracing only
    (backend="aot_eager": what the fake kernels and the autograd formula must support); on a GPU the full compile."""
    import torch

    g = ctx.generator("compile")
    for device in ctx.devices:
        backend = "inductor" if device == "cuda" else "aot_eager"

        def f(crow, col, values, x, w):
            return torch.ops.course.csr_matmul(crow, col, values, x @ w, x.shape[0]).square().sum()

        torch._dynamo.reset()
        compiled = torch.compile(f, fullgraph=True, backend=backend)
        for m, k, n in ((6, 5, 3), (9, 7, 4), (13, 10, 6)):
            ctx.case(
                f"torch.compile(fullgraph=True, backend={backend!r}), A {m}x{k} @ (x [{k}, 8] @ w [8, {n}]), on {device}"
            )
            crow, col, values = _csr(_lengths(m, "random", g), k, "float32", device, g)
            x = _dense(k, 8, "float32", device, g, "contiguous") / 3
            w = (_dense(8, n, "float32", device, g, "contiguous") / 3).requires_grad_()
            try:
                got = compiled(crow, col, values, x, w)
                got.backward()
            except Exception as e:  # noqa: BLE001  (a graph break or a trace error: its first lines say which)
                raise Fail(
                    f"torch.compile: {type(e).__name__}: " + "\n".join(str(e).strip().splitlines()[:5])
                ) from None
            grad, w.grad = w.grad.clone(), None
            want = f(crow, col, values, x, w)
            want.backward()
            try:
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                torch.testing.assert_close(grad, w.grad, rtol=1e-4, atol=1e-4)
            except AssertionError as e:
                raise Fail("compiled and eager differ: " + str(e).strip().splitlines()[0]) from None
    return "fullgraph, forward and backward, three shapes: the eager values and gradients"


def check_stream(ctx) -> str:
    """The op runs on PyTorch's current stream: on a side stream, the inputs are written after a long sleep and the
    op called right after; an op that launches elsewhere reads them before they are written. Each kernel is run
    once first (a module's first launch waits for the whole device, which would hide a launch elsewhere)."""
    import torch

    if "cuda" not in ctx.devices:
        raise Skip("no GPU")
    g = ctx.generator("stream")
    m = k = 4096
    crow, col, src_values = _csr(_lengths(m, "skewed", g, long_row=50_000), k, "float32", "cuda", g)
    side = torch.cuda.Stream()
    for n in (None, 64):
        src_b = _dense(k, n, "float32", "cuda", g, "contiguous")
        src_gy = _dense(m, n, "float32", "cuda", g, "contiguous")
        with torch.cuda.stream(side):
            for kernel in KERNELS:
                torch.ops.course.csr_matmul(crow, col, src_values, src_b, k, kernel)
                torch.ops.course.csr_matmul_backward(crow, col, src_values, src_gy, k, kernel)
        torch.cuda.synchronize()
        for kernel in KERNELS:
            for what in ("forward", "backward"):
                ctx.case(f"{what}, variant={kernel!r}, B {list(src_b.shape)}, on a side stream after torch.cuda._sleep")
                values, b, gy = (torch.zeros_like(t) for t in (src_values, src_b, src_gy))
                torch.cuda.synchronize()
                with torch.cuda.stream(side):
                    torch.cuda._sleep(50_000_000)  # tens of milliseconds: far longer than a launch
                    values.copy_(src_values)
                    b.copy_(src_b)
                    gy.copy_(src_gy)
                    if what == "forward":
                        out = torch.ops.course.csr_matmul(crow, col, values, b, k, kernel)
                    else:
                        out = torch.ops.course.csr_matmul_backward(crow, col, values, gy, k, kernel)
                side.synchronize()
                torch.cuda.synchronize()
                if what == "forward":
                    _close(out, *_reference(crow, col, src_values, src_b), "Y")
                else:
                    _close(out, *_reference_grad(crow, col, src_values, src_gy, k), "grad_dense")
    return "forward and backward, every kernel, ordered after earlier work on the current stream"


def check_large(ctx) -> str:
    """B with more than 2^31 values (2^22 + 4096 rows of 512 floats, 8.6 GB), A's columns near its end: an offset
    col * N computed in 32 bits wraps there. Forward (both kernels) and backward. Needs about 20 GiB of free GPU
    memory."""
    import torch

    if "cuda" not in ctx.devices:
        raise Skip("no GPU")
    k, n, m = (1 << 22) + 4096, 512, 64
    free, _ = torch.cuda.mem_get_info()
    need = 2 * k * n * 4 * 1.15
    if free < need:
        raise Skip(f"{need / 2**30:.0f} GiB of free GPU memory needed, {free / 2**30:.0f} GiB free")
    g = ctx.generator("large")
    lengths = torch.full((m,), 8, dtype=torch.long)
    crow = torch.zeros(m + 1, dtype=torch.long)
    crow[1:] = lengths.cumsum(0)
    high = torch.randint(k - 8192, k, (m * 4,), generator=g)  # past 2^31 / 512 = 2^22: offsets above 2^31
    low = torch.randint(0, k, (m * 4,), generator=g)
    col = torch.stack([high.view(m, 4), low.view(m, 4)], 1).view(m, 8).sort(1).values.reshape(-1)
    values = torch.randn(m * 8, generator=g)
    crow, col, values = crow.cuda(), col.cuda(), values.cuda()
    gen = torch.Generator(device="cuda").manual_seed(ctx.seed)
    b = torch.randn(k, n, device="cuda", generator=gen)
    used = col.unique()
    # The reference from the rows A uses only: B's other rows cannot change Y.
    want = _reference(crow, torch.searchsorted(used, col), values, b[used])
    for kernel in ("warp_per_row", "balanced"):
        ctx.case(f"A {m}x{k} (columns near {k}), B [{k}, {n}] float32 ({k * n:,} values), variant={kernel!r}")
        _close(torch.ops.course.csr_matmul(crow, col, values, b, k, kernel), *want, "Y")
    del b
    torch.cuda.empty_cache()
    grad_y = torch.randn(m, n, device="cuda", generator=gen)
    want_rows, size_rows = _reference_grad(crow, torch.searchsorted(used, col), values, grad_y, used.numel())
    for kernel in ("warp_per_row", "balanced"):
        ctx.case(f"backward: grad_dense [{k}, {n}] float32, variant={kernel!r}")
        got = torch.ops.course.csr_matmul_backward(crow, col, values, grad_y, k, kernel)
        _close(got[used], want_rows, size_rows, "grad_dense's rows that A's columns name")
        touched = int(got.ne(0).any(1).sum())
        if touched > used.numel():
            raise Fail(f"grad_dense has {touched} nonzero rows; A's columns name {used.numel()}")
        del got
        torch.cuda.empty_cache()
    return f"B [{k}, {n}] float32 ({k * n:,} values): Y and grad_dense right near B's end, both kernels"


def _power_law(m: int, gen):
    """Row lengths of the speed check's skewed matrix, on the GPU: 0..29 for every row (14.5 on average) plus a
    Zipf tail, 100,000 / rank for the rows ranked 1, 2, ... in a random order: rows of 100,000, 50,000, ...,
    ten rows of 10,000 or more, and about 1.2 nonzeros more per row on average (about 16 in all)."""
    import torch

    rank = torch.randperm(m, device="cuda", generator=gen) + 1
    return torch.randint(0, 30, (m,), device="cuda", generator=gen) + (100_000 / rank).long()


def _gpu_csr(lengths, k: int, dtype, gen):
    """(crow, col, values) on the GPU from row lengths: columns uniform and sorted within rows, values N(0, 1)."""
    import torch

    m = lengths.numel()
    crow = torch.zeros(m + 1, dtype=torch.long, device="cuda")
    crow[1:] = lengths.cumsum(0)
    rows = torch.repeat_interleave(torch.arange(m, device="cuda"), lengths)
    cols = torch.randint(0, k, rows.shape, device="cuda", generator=gen)
    cols = (rows * k + cols).sort().values % k
    return crow, cols, torch.randn(cols.shape, device="cuda", generator=gen, dtype=dtype)


def _timed(ctx, matrix: str, lengths, n, dtype, gen, compiled, notes: dict) -> list[tuple[str, dict]]:
    """One configuration of check_speed: (label, bench.compare's rows by impl) for forward and forward+backward."""
    import torch

    from .. import bench

    m = k = lengths.numel()
    op = torch.ops.course.csr_matmul
    crow, col, values = _gpu_csr(lengths, k, dtype, gen)
    a = torch.sparse_csr_tensor(crow, col, values, (m, k))
    shape_b, shape_y = ((k,), (m,)) if n is None else ((k, n), (m, n))
    bs = [torch.randn(shape_b, device="cuda", dtype=dtype, generator=gen) for _ in range(3)]
    gys = [torch.randn(shape_y, device="cuda", dtype=dtype, generator=gen) for _ in range(3)]
    turn = [0]

    def fresh():  # each timed call takes the next of 3 inputs: a result cached by input cannot be replayed
        turn[0] = (turn[0] + 1) % 3
        return turn[0]

    def ours(kernel="auto"):
        return lambda: op(crow, col, values, bs[fresh()], k, kernel)

    def ours_fb(kernel="auto"):
        def run():
            i = fresh()
            b = bs[i].detach().requires_grad_()
            op(crow, col, values, b, k, kernel).backward(gys[i])

        return run

    def native_fb():
        i = fresh()
        b = bs[i].detach().requires_grad_()
        (a @ b).backward(gys[i])

    fns = {
        "forward": {"yours": ours(), "torch.sparse": lambda: a @ bs[fresh()]},
        "forward+backward": {"yours": ours_fb()},
    }
    if matrix == "power law":
        fns["forward"]["yours, warp_per_row"] = ours("warp_per_row")
        fns["forward+backward"]["yours, warp_per_row"] = ours_fb("warp_per_row")
    for what, name, fn in (
        ("forward+backward", "torch.sparse", native_fb),
        ("forward", "torch.compile", lambda: compiled(a, bs[fresh()])),
    ):
        try:
            fn()
            torch.cuda.synchronize()
            fns[what][name] = fn
        except Exception as e:  # noqa: BLE001  (what torch does not run here is reported, not timed)
            notes[f"{name} {what}"] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:120]}"
    s, cols = values.element_size(), n or 1
    a_bytes = 8 * (m + 1) + (8 + s) * col.numel()
    fwd_bytes = a_bytes + s * cols * (k + m)
    out = []
    for what, nbytes in (("forward", fwd_bytes), ("forward+backward", fwd_bytes + a_bytes + s * cols * (m + k))):
        label = f"{matrix:<9} {what:<16} N={cols:<2} {str(dtype).replace('torch.', ''):<7}"
        ctx.case(label)
        out.append((label, {r["impl"]: r for r in bench.compare(fns[what], nbytes=nbytes, device="cuda")}))
    return out


def check_speed(ctx) -> str:
    """Forward and forward+backward (B's gradient) at M = K = 2^20, about 16 nonzeros per row, on a power-law
    matrix (a few rows of 10^4..10^5) and a uniform one (16 per row), N = 1 (a vector: float32 and float64) and
    N = 64 (float32), against torch.sparse (A_csr @ B, backward by autograd) and torch.compile of it where it
    runs, each timed call with the next of 3 inputs. GB/s count the fewest bytes: crow, col and values once,
    each row of B once, Y written once (backward: A again, grad_Y read, grad_B written); a gather reads a row of
    B once per nonzero of its column, so % of a copy stays well below 100 % for N = 64. A time far below a copy
    of those bytes is impossible and fails the check."""
    import torch

    if "cuda" not in ctx.devices:
        raise Skip("no GPU: timings need one")
    gen = torch.Generator(device="cuda").manual_seed(ctx.seed)
    m = 1 << 20
    compiled = torch.compile(lambda a, b: a @ b)
    notes, lines, impossible = {}, [], []
    for matrix, lengths in (("power law", _power_law(m, gen)), ("uniform", torch.full((m,), 16, device="cuda"))):
        for n, dtype in ((None, torch.float32), (None, torch.float64), (64, torch.float32)):
            for label, res in _timed(ctx, matrix, lengths, n, dtype, gen, compiled, notes):
                ours = res["yours"]
                lines.append(
                    f"{label} {ours['ms']:.3f} ms, {ours['gbps']:.0f} GB/s ({ours['pct_copy']:.0f} % of a copy); "
                    + ", ".join(f"{name} {r['ms'] / ours['ms']:.2f}x" for name, r in res.items() if name != "yours")
                )
                if ours["pct_copy"] > IMPOSSIBLE_PCT:
                    impossible.append(f"{label}: {ours['pct_copy']:.0f} % of a copy of the same bytes")
            torch.cuda.empty_cache()
    text = "times as ratios: theirs / yours (above 1: yours is faster)\n" + "\n".join(lines)
    if notes:
        text += "\nnot timed: " + "; ".join(f"{what}: {why}" for what, why in notes.items())
    if impossible:
        raise Fail(
            "impossible: faster than a copy of the bytes the op must move (is work skipped, cached, or on another "
            "stream?):\n" + "\n".join(impossible) + "\n" + text
        )
    return text


# The wrong answers this grader must reject (tests/grade/test_practice.py): typical mistakes and an exploit.
_ROW_LOOP = "for (int64_t i = crow[r]; i < crow[r + 1]; ++i) {\n      const T v = val[i];"
_ZERO_ROW = "    for (int64_t j = 0; j < n; ++j) out[j] = T(0);\n"
_PLACE = "      t_col[slot] = r;\n      t_val[slot] = val[i];"
_BALANCED_CARRY = "const T rest = dot_segment(a, b, k, k_end, lane, seen);"
CORPUS = [
    E(
        "row_end_inclusive",
        "the row loop runs to crow[i+1] inclusive: each row takes the next row's first nonzero too",
        "forward",
        "cpu",
        ("csr_matmul.cpu.cpp", _ROW_LOOP, _ROW_LOOP.replace("i < crow[r + 1]", "i <= crow[r + 1]")),
    ),
    E(
        "empty_rows_skipped",
        "a row without nonzeros is skipped before its zeros are written: Y keeps whatever the memory held",
        "forward",
        "cpu",
        ("csr_matmul.cpu.cpp", _ZERO_ROW, "    if (crow[r] == crow[r + 1]) continue;\n" + _ZERO_ROW),
    ),
    E(
        "backward_uses_A_not_its_transpose",
        "the transpose places each nonzero under its row with its column as the new column (A again, not A^T)",
        "backward",
        "cpu",
        ("csr_matmul.cpu.cpp", _PLACE, "      t_col[slot] = col[i];\n      t_val[slot] = val[i];"),
    ),
    E(
        "dense_read_as_contiguous",
        "dense used as it comes, not .contiguous(): a transposed or strided B is read as if it were contiguous",
        "forward",
        "cpu",
        ("csr_matmul.cpp", "const at::Tensor dense = dense_in.contiguous();", "const at::Tensor dense = dense_in;"),
    ),
    E(
        "columns_unchecked_on_cpu",
        "no check of col_indices' range on the CPU: a column past K reads outside B",
        "errors",
        "cpu",
        (
            "csr_matmul.cpp",
            "  for (int64_t i = 0; i < nnz; ++i)\n"
            '    if (j[i] < 0 || j[i] >= k) report_bad_indices(kBadCol, k, nnz, at("col_indices", i, j[i]));\n',
            "",
        ),
    ),
    E(
        "fake_of_the_wrong_shape_for_a_vector",
        "the fake kernel returns [M, 1] for a 1-D dense, where the kernel returns [M]",
        "opcheck",
        "cpu",
        (
            "csr_matmul.py",
            "return dense.new_empty(_out_shape(crow_indices.shape[0] - 1, dense))",
            "return dense.new_empty((crow_indices.shape[0] - 1, dense.shape[-1] if dense.dim() == 2 else 1))",
        ),
    ),
    E(
        "gradient_in_the_wrong_slot",
        "backward returns the gradient in values' place: B gets none",
        "backward",
        "cpu",
        (
            "csr_matmul.py",
            "return None, None, None, grad_dense, None, None",
            "return None, None, grad_dense, None, None, None",
        ),
    ),
    E(
        "caches_outputs_by_input",
        "remembers the last A and B by address and returns the last Y for them without computing",
        "forward",
        "cpu",
        (
            "csr_matmul.py",
            "def register(lib: torch.library.Library) -> None:\n",
            "_memo = {}\n\n\n"
            "def _cached(crow, col, values, dense, n_cols_A, kernel='auto'):\n"
            "    key = (crow.data_ptr(), col.data_ptr(), values.data_ptr(), dense.data_ptr(), tuple(dense.shape))\n"
            "    if key not in _memo:\n"
            "        _memo[key] = _op(crow, col, values, dense, n_cols_A, kernel)\n"
            "    return _memo[key].clone()\n\n\n"
            "def register(lib: torch.library.Library) -> None:\n",
        ),
        (
            "csr_matmul.py",
            '    torch.library.register_autograd("course::csr_matmul", backward, setup_context=setup_context, lib=lib)\n',
            '    torch.library.register_autograd("course::csr_matmul", backward, setup_context=setup_context, lib=lib)\n'
            "    global _op\n"
            "    _op = torch.ops.course.csr_matmul.default\n"
            "    torch.ops.course.csr_matmul = _cached\n",
        ),
    ),
    E(
        "gradient_not_zeroed",
        "grad_dense allocated with at::empty: the GPU's atomic adds land on whatever the memory held",
        "backward",
        "cuda",
        (
            "csr_matmul.cpp",
            "at::Tensor grad_b = at::zeros(rows_like(grad_y, k), grad_y.options());",
            "at::Tensor grad_b = at::empty(rows_like(grad_y, k), grad_y.options());",
        ),
    ),
    E(
        "carries_dropped",
        "the balanced kernel stores each share's unfinished row part as 0: a row split over warps loses all but its last part",
        "skewed",
        "cuda",
        ("csr_matmul.cu", _BALANCED_CARRY, "const T rest = 0;"),
    ),
    E(
        "offset_in_32_bits",
        "the offset of B's row computed as an int: past 2^31 values of B it wraps",
        "large",
        "cuda",
        ("csr_matmul.cu", "load_pack<T, V>(b + c * n + c0)", "load_pack<T, V>(b + int(c * n) + c0)"),
    ),
    E(
        "legacy_default_stream",
        "the warp-per-row kernels launched on the legacy default stream, not PyTorch's current one",
        "stream",
        "cuda",
        (
            "csr_matmul.cu",
            "csr_spmv_warp_row_kernel<T><<<blocks, kThreads, 0, stream>>>(a, b, y);",
            "csr_spmv_warp_row_kernel<T><<<blocks, kThreads, 0, 0>>>(a, b, y);",
        ),
        (
            "csr_matmul.cu",
            "csr_spmm_warp_row_kernel<T, V><<<blocks, kThreads, 0, stream>>>(a, b, y, n);",
            "csr_spmm_warp_row_kernel<T, V><<<blocks, kThreads, 0, 0>>>(a, b, y, n);",
        ),
    ),
    E(
        "benchmark_shape_skipped",
        "the benchmark's shape special-cased: for M = 2^20 nothing is computed",
        "speed",
        "cuda",
        (
            "csr_matmul.cu",
            "  const CsrView<T> a{crow, col, val, m, k, nnz, bad};\n  with_pack_width<T>(n == 1 ? 1 : pack_width<T>(n, b, y)",
            "  if (m == (1 << 20)) return;\n  const CsrView<T> a{crow, col, val, m, k, nnz, bad};\n"
            "  with_pack_width<T>(n == 1 ? 1 : pack_width<T>(n, b, y)",
        ),
    ),
]
