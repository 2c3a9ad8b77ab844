"""Self-check for lesson 03's first exercise: kernels/exercises/layernorm_warp_reduce.cuh, the row statistics of
LayerNorm forward version 2 (`ext.forward(x, weight, bias, eps, 2)`, ext = loader.load("layernorm")). Part 1
(the CPU row statistics) is checked on the CPU, Part 2 (warp_sum, inside forward_v2_kernel) on a GPU."""

from __future__ import annotations

import torch

from .. import check as _check
from .. import loader, selfcheck
from . import Wrong

OP = "layernorm"
VERSION = 2  # forward v2 runs your code (v1 and v3 are the course's)


def _uniform(g, lo, hi) -> float:
    return float(torch.empty(()).uniform_(lo, hi, generator=g))


def reference(x, weight, bias, eps):
    """y, mean and rstd computed in float64 and rounded: y to x's dtype, the statistics to float32 (float64)."""
    xd = x.double()
    mean = xd.mean(-1)
    rstd = torch.rsqrt(((xd - mean[..., None]) ** 2).mean(-1) + eps)
    y = (xd - mean[..., None]) * rstd[..., None] * weight.double() + bias.double()
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return y.to(x.dtype), mean.to(acc), rstd.to(acc)


def _inputs(shape, dtype, device, g):
    """Everything drawn per case: the rows' scale and shift, eps (1e-5..1e-1: large enough, next to the
    variance, that forgetting it shows), weight and bias."""
    n = shape[-1]
    scale = 10 ** _uniform(g, -1, 1)
    shift = _uniform(g, -2, 2) * scale
    eps = 10 ** _uniform(g, -5, -1)
    x = (torch.randn(shape, generator=g) * scale + shift).to(device=device, dtype=dtype)
    weight = torch.randn(n, generator=g).to(device=device, dtype=dtype)
    bias = torch.randn(n, generator=g).to(device=device, dtype=dtype)
    return x, weight, bias, eps


def _large_mean_inputs(shape, dtype, device, g):
    """float32 rows with a mean of 200..400 (either sign) and a standard deviation of 0.5..2."""
    x, weight, bias, _ = _inputs(shape, dtype, device, g)
    m = shape[0]
    sign = torch.where(torch.rand(m, 1, generator=g) < 0.5, -1.0, 1.0)
    shift = torch.empty(m, 1).uniform_(200, 400, generator=g) * sign
    std = torch.empty(m, 1).uniform_(0.5, 2, generator=g)
    x = (torch.randn(shape, generator=g) * std + shift).to(device=device, dtype=dtype)
    return x, weight, bias, 10 ** _uniform(g, -5, -3)


# The rule of the numerics cell, checked on the statistics alone (y inherits the float32 rounding of a mean
# of ~300 in any formula: ~6e-4). Measured on the CPU over 2,000 seeds: the two-pass solution's
# mean and rstd are within 2.5e-6 and 1.0e-6 (relative) of float64, the tolerance is 1e-5; the one-pass
# mean(x^2) - mean(x)^2 misses rstd by at least 2e-2 in every seed.
LARGE_MEAN = dict(
    shapes_=[(16, 1024)],
    dtypes=(torch.float32,),
    why="rows with a large mean (about 300, standard deviation about 1): the variance must be computed in two "
    "passes, mean((x - mean)^2); mean(x^2) - mean(x)^2 cancels catastrophically there (the lesson's numerics cell)",
)


def _stats_reference(x, weight, bias, eps):
    return reference(x, weight, bias, eps)[1:]


# A plain running sum in float over a row of 65539 values with a mean of 2 standard deviations rounds the
# mean by up to ~2e-5 of the scale, which y shows, and rstd by up to ~3e-5 (the course's kernels sum in
# blocks or trees). For half and bf16 x, mean and rstd (float32) get x's tolerance, as y does.
TOLERANCES = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float16: _check.tolerances(torch.float16),
    torch.bfloat16: _check.tolerances(torch.bfloat16),
}


@selfcheck.sanitizable
def check(device=None, ext=None, seed=None) -> int:
    """Forward v2 (y, mean, rstd) against the reference on every part you wrote: your CPU row statistics
    (Part 1), and in CUDA mode your warp_sum (Part 2). Every dtype and shape, each with random values, scale,
    shift, eps, weight and bias, then rows with a large mean (the two-pass variance: mean and rstd only)."""
    ext = ext or loader.load(OP)

    def yours(x, weight, bias, eps):
        return tuple(ext.forward(x, weight, bias, eps, VERSION))

    cases = 0
    with selfcheck.exercise("layernorm_warp_reduce"):
        for dev in selfcheck.parts(device):
            if dev.type == "cuda":
                where = "warp_sum (Part 2)"
                hint = (
                    "every lane must end with the sum over all 32 lanes: five rounds of "
                    "v += __shfl_xor_sync(0xffffffffu, v, offset) with offset = 16, 8, 4, 2, 1"
                )
            else:
                where = "the CPU row statistics (Part 1)"
                hint = (
                    "first the mean (sum / n), then var = the mean of (x - mean)^2 (divide by n, not n - 1); "
                    "write *mean and *rstd = 1 / sqrt(var + eps)"
                )
            hint += "; see kernels/exercises/layernorm_warp_reduce.cuh"
            cases += selfcheck.run(
                f"LayerNorm forward v2, {where}",
                yours,
                reference,
                _inputs,
                device=dev,
                seed=seed,
                hint=hint,
                tolerances=TOLERANCES,
            )
            cases += selfcheck.run(
                f"LayerNorm forward v2 (mean, rstd) of rows with a large mean, {where}",
                lambda *inputs: yours(*inputs)[1:],
                _stats_reference,
                _large_mean_inputs,
                device=dev,
                seed=seed,
                shapes_=LARGE_MEAN["shapes_"],
                dtypes=LARGE_MEAN["dtypes"],
                hint=f"this case checks {LARGE_MEAN['why']}; {hint}",
            )
    return cases


_VAR = "  *rstd = T(1) / std::sqrt(sq / n + eps);"
_SHFL = "v += __shfl_xor_sync(0xffffffffu, v, offset);"
_LOOP = "for (int offset = 16; offset > 0; offset /= 2)"

WRONG = [
    Wrong(
        "the one-pass variance mean(x^2) - mean(x)^2, which the numerics cell warns against",
        [
            (
                "  T sq = 0;\n  for (int64_t j = 0; j < n; ++j) {\n    const T d = x[j] - mu;\n    sq += d * d;\n  }",
                "  T sq = 0;\n  for (int64_t j = 0; j < n; ++j) sq += x[j] * x[j];\n  sq -= n * mu * mu;",
            ),
        ],
        "cpu",
    ),
    Wrong(
        "the unbiased variance (divide by n - 1): LayerNorm divides by n",
        [(_VAR, _VAR.replace("sq / n", "sq / (n - 1)"))],
        "cpu",
    ),
    Wrong("rstd without eps", [(_VAR, _VAR.replace("sq / n + eps", "sq / n"))], "cpu"),
    Wrong(
        "eps outside the square root: 1 / (sqrt(var) + eps)",
        [(_VAR, "  *rstd = T(1) / (std::sqrt(sq / n) + eps);")],
        "cpu",
    ),
    Wrong("forgets to write the mean", [("  *mean = mu;\n", "")], "cpu"),
    Wrong(
        "__shfl_down_sync: only lane 0 ends with the total, but every lane uses it",
        [(_SHFL, _SHFL.replace("__shfl_xor_sync", "__shfl_down_sync"))],
        "cuda",
    ),
    Wrong(
        "stops before offset 1: pairs of lanes are never added",
        [(_LOOP, _LOOP.replace("offset > 0", "offset > 1"))],
        "cuda",
    ),
    Wrong(
        "starts at offset 32: lane ^ 32 wraps to the lane itself, so every value is doubled first",
        [(_LOOP, _LOOP.replace("offset = 16", "offset = 32"))],
        "cuda",
    ),
    Wrong(
        "only one round (offset 16): each lane gets the sum of 2 lanes",
        [(_LOOP + " ", "for (int offset = 16; offset > 8; offset /= 2) ")],
        "cuda",
    ),
]
