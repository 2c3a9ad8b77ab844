"""Self-check for lesson 05's first exercise: kernels/exercises/rmsnorm_row.cuh, RMSNorm forward of one row
(`ext.forward(x, weight, eps)`, ext = loader.load("rmsnorm_row")). Part 1 (the CPU loop) is checked on the CPU,
Part 2 (rmsnorm_row_warp, one warp per row) on a GPU."""

from __future__ import annotations

import torch

from .. import check as _check
from .. import loader, selfcheck
from . import Wrong

OP = "rmsnorm_row"


def _uniform(g, lo, hi) -> float:
    return float(torch.empty(()).uniform_(lo, hi, generator=g))


def reference(x, weight, eps):
    """y and rstd computed in float64 and rounded: y to x's dtype, rstd to float32 (float64 for float64 x)."""
    xd = x.double()
    rstd = torch.rsqrt((xd * xd).mean(-1) + eps)
    y = xd * rstd[..., None] * weight.double()
    return y.to(x.dtype), rstd.to(torch.float64 if x.dtype == torch.float64 else torch.float32)


def _inputs(shape, dtype, device, g):
    """Everything drawn per case: the rows' scale (0.1..10) and a shift (a mean of up to 2 scales: RMSNorm
    does not subtract it), eps (1e-5..1e-1) and the weight."""
    scale = 10 ** _uniform(g, -1, 1)
    x = (torch.randn(shape, generator=g) + _uniform(g, -2, 2)) * scale
    weight = torch.randn(shape[-1], generator=g)
    return x.to(device=device, dtype=dtype), weight.to(device=device, dtype=dtype), 10 ** _uniform(g, -5, -1)


def _small_inputs(shape, dtype, device, g):
    """Rows of small values (root mean square about 1e-3) and eps = 1e-2, which dominates the mean of x^2;
    every third row all zeros (padding), where rstd is 1 / sqrt(eps)."""
    x, weight, _ = _inputs(shape, torch.float64, "cpu", g)
    x = x / x.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-30) * 1e-3
    x[::3] = 0
    return x.to(device=device, dtype=dtype), weight.to(device=device, dtype=dtype), 1e-2


def _long_inputs(shape, dtype, device, g):
    """Long rows of values near 4: the sum of their squares (about 1e6) is beyond float16's range (65504) and
    needs float's 24 bits of mantissa."""
    x = torch.randn(shape, generator=g) * 0.5 + 4
    weight = torch.randn(shape[-1], generator=g)
    return x.to(device=device, dtype=dtype), weight.to(device=device, dtype=dtype), 1e-6


def _rstd(ext):
    return lambda *inputs: ext.forward(*inputs)[1]


def _rstd_reference(*inputs):
    return reference(*inputs)[1]


# A float running sum of 65539 squares is within ~1e-6 (relative) of float64; tolerance 1e-4 for y and rstd
# in float32 (the course's kernels sum in trees). rstd of float16/bfloat16 rows is float32 math too: it gets
# float32's tolerance in the special cases, where a running sum in float16 is off by 1e-3 or more (or is inf).
TOLERANCES = {
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.float16: _check.tolerances(torch.float16),
    torch.bfloat16: _check.tolerances(torch.bfloat16),
}
RSTD_TOLERANCE = dict(rtol=1e-4, atol=0.0)


def check(device=None, ext=None, seed=None) -> int:
    """forward(x, weight, eps) -> (y, rstd) against the reference on every part you wrote: your CPU loop
    (Part 1), and in CUDA mode your warp (Part 2). Every dtype and shape, each with random values, scale,
    eps and weight; then rows where eps matters (small values, zero rows) and long float16/bfloat16 rows,
    whose rstd must be float32 math."""
    ext = ext or loader.load(OP)
    cases = 0
    with selfcheck.exercise("rmsnorm_row"):
        for dev in selfcheck.parts(device):
            if dev.type == "cuda":
                where = "rmsnorm_row_warp (Part 2)"
                hint = (
                    "each lane sums the squares of its elements (l, l + 32, ...) in Acc<T>, five __shfl_xor_sync "
                    "rounds give every lane the row's sum; rstd = rsqrt(sum / n + eps); y = x * rstd * weight"
                )
            else:
                where = "the CPU loop (Part 1)"
                hint = (
                    "rstd = 1 / sqrt(the MEAN of x^2 + eps) (sum of x[j] * x[j], divided by n); y = x * rstd * weight"
                )
            hint += "; see kernels/exercises/rmsnorm_row.cuh"
            title = f"RMSNorm forward of a row, {where}"
            cases += selfcheck.run(
                title,
                lambda *inputs: tuple(ext.forward(*inputs)),
                reference,
                _inputs,
                device=dev,
                seed=seed,
                hint=hint,
                tolerances=TOLERANCES,
                special=[
                    selfcheck.Case(
                        "rows of tiny values and zero rows, where eps outweighs the mean of x^2 "
                        "(rstd = 1 / sqrt(mean(x^2) + eps))",
                        (9, 1000),
                        torch.float32,
                        _small_inputs,
                    )
                ],
            )
            cases += selfcheck.run(
                f"RMSNorm rstd of float16 and bfloat16 rows, {where}",
                _rstd(ext),
                _rstd_reference,
                _long_inputs,
                device=dev,
                seed=seed,
                shapes_=[(4, 4099), (2, 65539)],
                dtypes=(torch.float16, torch.bfloat16),
                tolerances={torch.float16: RSTD_TOLERANCE, torch.bfloat16: RSTD_TOLERANCE},
                hint="rstd is float32 math for float16 and bfloat16 rows: convert each element to Acc<T> "
                "(to_acc) and sum in Acc<T>; a float16 sum rounds at every step and overflows above 65504. " + hint,
            )
    return cases


_CPU_SUM = "  for (int64_t j = 0; j < n; ++j) sq += x[j] * x[j];"
_CPU_R = "  const T r = T(1) / std::sqrt(sq / n + eps);"
_WARP_SUM = "  for (int j = lane; j < n; j += 32) sq += to_acc(x[j]) * to_acc(x[j]);"

WRONG = [
    Wrong("forgets eps: 1 / sqrt(mean(x^2))", [(_CPU_R, _CPU_R.replace("sq / n + eps", "sq / n"))], "cpu"),
    Wrong(
        "the mean of |x| instead of the mean of x^2",
        [(_CPU_SUM, "  for (int64_t j = 0; j < n; ++j) sq += std::abs(x[j]);")],
        "cpu",
    ),
    Wrong(
        "the mean of x (LayerNorm's first statistic) instead of the mean of x^2",
        [(_CPU_SUM, "  for (int64_t j = 0; j < n; ++j) sq += x[j];")],
        "cpu",
    ),
    Wrong("rsqrt of the sum of x^2, not of its mean", [(_CPU_R, _CPU_R.replace("sq / n + eps", "sq + eps"))], "cpu"),
    Wrong(
        "accumulates the squares in T (float16/bfloat16) instead of Acc<T> (float)",
        [
            (
                "  Acc<T> sq = 0;\n" + _WARP_SUM,
                "  T sq_t = from_acc<T>(Acc<T>(0));\n"
                "  for (int j = lane; j < n; j += 32) sq_t = from_acc<T>(to_acc(sq_t) + to_acc(x[j]) * to_acc(x[j]));\n"
                "  Acc<T> sq = to_acc(sq_t);",
            )
        ],
        "cuda",
    ),
    Wrong(
        "no shuffles: each lane normalizes with the sum of its own elements only",
        [("  for (int offset = 16; offset > 0; offset /= 2) sq += __shfl_xor_sync(0xffffffffu, sq, offset);\n", "")],
        "cuda",
    ),
    Wrong(
        "forgets eps on the GPU",
        [("  const Acc<T> r = rsqrt(sq / n + eps);", "  const Acc<T> r = rsqrt(sq / n);")],
        "cuda",
    ),
]
