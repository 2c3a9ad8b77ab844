"""Self-check for lesson 03's second exercise: kernels/exercises/layernorm_backward_row.cuh, grad_x of one row
in LayerNorm backward version 1 (`ext.backward(grad_y, x, mean, rstd, weight, 1)[0]`, ext =
loader.load("layernorm")). Part 1 (the CPU loop) is checked on the CPU, Part 2 (one warp per row, inside
backward_v1_dx_kernel) on a GPU."""

from __future__ import annotations

import torch

from .. import loader, selfcheck
from . import Wrong

OP = "layernorm"
VERSION = 1  # backward v1's grad_x runs your code (v2 is the course's)


def _uniform(g, lo, hi) -> float:
    return float(torch.empty(()).uniform_(lo, hi, generator=g))


def reference(x, grad_y, weight, mean, rstd):
    """grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad_y * weight, in float64, rounded."""
    xhat = (x.double() - mean.double()[..., None]) * rstd.double()[..., None]
    g = grad_y.double() * weight.double()
    mean_g, mean_gx = g.mean(-1, keepdim=True), (g * xhat).mean(-1, keepdim=True)
    return (rstd.double()[..., None] * (g - mean_g - xhat * mean_gx)).to(x.dtype)


def _inputs(shape, dtype, device, g):
    """Everything drawn per case: the rows' scale and shift, eps, weight, grad_y; mean and rstd are what
    forward saves (float64 statistics rounded to float32, or kept in float64 for float64 x)."""
    n = shape[-1]
    scale = 10 ** _uniform(g, -1, 1)
    shift = _uniform(g, -3, 3) * scale
    eps = 10 ** _uniform(g, -5, -1)
    x = (torch.randn(shape, generator=g) * scale + shift).to(dtype)
    weight = torch.randn(n, generator=g).to(dtype)
    grad_y = torch.randn(shape, generator=g).to(dtype)
    xd = x.double()
    mean = xd.mean(-1)
    rstd = torch.rsqrt(((xd - mean[..., None]) ** 2).mean(-1) + eps)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return tuple(t.to(device) for t in (x, grad_y, weight, mean.to(acc), rstd.to(acc)))


# float32's absolute tolerance: g - mean(g) cancels, and rstd (up to 1/sqrt(eps) = 316 for a row of one value)
# multiplies what is left. On the GPU the compiler fuses g - mean_g into one fma that keeps the product's
# rounding error, so a correct kernel can give rstd * 2^-24 * |g| (1.9e-5 where the exact answer is 0,
# on the H100). Wrong answers miss by O(1).
TOLERANCES = {torch.float32: dict(rtol=1e-5, atol=5e-4)}


@selfcheck.sanitizable
def check(device=None, ext=None, seed=None) -> int:
    """Backward v1's grad_x against the reference on every part you wrote: your CPU loop (Part 1), and in
    CUDA mode your one-warp-per-row code (Part 2), over every dtype and awkward row length (1, 3, 31, 257, ...:
    not multiples of 32), with random values, weight and statistics in every run."""
    ext = ext or loader.load(OP)

    def yours(x, grad_y, weight, mean, rstd):
        return ext.backward(grad_y, x, mean, rstd, weight, VERSION)[0]

    formula = (
        "grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = grad_y * weight and xhat = (x - mean) * rstd"
    )
    cases = 0
    with selfcheck.exercise("layernorm_backward_row"):
        for dev in selfcheck.parts(device):
            if dev.type == "cuda":
                where = "the warp's row (Part 2)"
                hint = (
                    f"{formula}; lane `lane` handles j = lane, lane + 32, ...; warp_sum of the lanes' sums gives "
                    "every lane the totals (it is your answer to layernorm_warp_reduce: that self-check must pass "
                    "first)"
                )
            else:
                where = "the CPU loop (Part 1)"
                hint = f"{formula}; both means over the n values of the row, then every grad_x[j] for j < n"
            cases += selfcheck.run(
                f"LayerNorm backward v1 grad_x, {where}",
                yours,
                reference,
                _inputs,
                device=dev,
                seed=seed,
                hint=hint + "; see kernels/exercises/layernorm_backward_row.cuh",
                tolerances=TOLERANCES,
            )
    return cases


_CPU_G = "    const T g = grad_y[j] * weight[j];\n"
_CPU_MEANS = "const T mean_g = sum_g / n, mean_gx = sum_gx / n;"
_CPU_OUT = "grad_x[j] = rstd * (grad_y[j] * weight[j] - mean_g - xhat * mean_gx);"
_CUDA_G = "    const acc_t g = to_acc(grad_y[j]) * to_acc(weight[j]);\n"
_CUDA_MEANS = "const acc_t mean_g = warp_sum(sum_g) / n, mean_gx = warp_sum(sum_gx) / n;"
_CUDA_OUT = "grad_x[j] = from_acc<T>(rstd * (g - mean_g - xhat * mean_gx));"

WRONG = [
    Wrong(
        "forgets the weight: g = grad_y instead of grad_y * weight",
        [(_CPU_G, _CPU_G.replace(" * weight[j]", "")), (_CPU_OUT, _CPU_OUT.replace(" * weight[j]", ""))],
        "cpu",
    ),
    Wrong("drops the mean(g) term", [(_CPU_OUT, _CPU_OUT.replace(" - mean_g", ""))], "cpu"),
    Wrong(
        "the means over n - 1 values (as for an unbiased variance) instead of the row's n",
        [(_CPU_MEANS, _CPU_MEANS.replace("/ n", "/ (n - 1)"))],
        "cpu",
    ),
    Wrong(
        "xhat without rstd: (x - mean) where the formula has (x - mean) * rstd",
        [("    const T xhat = (x[j] - mean) * rstd;", "    const T xhat = x[j] - mean;")],
        "cpu",
    ),
    Wrong(
        "the means from this lane's partial sums only (no warp_sum)",
        [(_CUDA_MEANS, _CUDA_MEANS.replace("warp_sum(sum_g)", "sum_g").replace("warp_sum(sum_gx)", "sum_gx"))],
        "cuda",
    ),
    Wrong(
        "forgets the weight in the sums: g = grad_y",
        [(_CUDA_G, _CUDA_G.replace(" * to_acc(weight[j])", ""))],
        "cuda",
    ),
    Wrong("forgets the outer rstd", [(_CUDA_OUT, "grad_x[j] = from_acc<T>(g - mean_g - xhat * mean_gx);")], "cuda"),
]
