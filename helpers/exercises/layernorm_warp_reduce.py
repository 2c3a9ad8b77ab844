"""Self-check for the lesson 03 exercise: kernels/exercises/layernorm_warp_reduce.cuh (the row statistics of
LayerNorm forward version 2: Part 1 on the CPU, Part 2, the warp reduction, on a GPU)."""

from __future__ import annotations

import torch

from .. import env as _env
from .. import loader, selfcheck

EPS = 1e-5


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    """y, mean and rstd computed in float64 and rounded: y to x's dtype, the statistics to float32 (float64)."""
    xd = x.double()
    mean = xd.mean(-1)
    rstd = torch.rsqrt(((xd - mean[..., None]) ** 2).mean(-1) + EPS)
    y = (xd - mean[..., None]) * rstd[..., None] * weight.double() + bias.double()
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return y.to(x.dtype), mean.to(acc), rstd.to(acc)


def _inputs(shape, dtype, device, g):
    n = shape[-1]
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(device=device, dtype=dtype)
    weight = torch.randn(n, generator=g).to(device=device, dtype=dtype)
    bias = torch.randn(n, generator=g).to(device=device, dtype=dtype)
    return x, weight, bias


def check(device=None, ext=None) -> int:
    """Forward version 2 (y, mean, rstd) against the reference: your CPU row statistics in CPU mode,
    your warp_sum on a GPU."""
    device = _env.default_device(device)
    ext = ext or loader.load("layernorm")

    def yours(x, weight, bias):
        return tuple(ext.forward(x, weight, bias, EPS, 2))

    where = "warp_sum (Part 2)" if device.type == "cuda" else "the CPU row statistics (Part 1)"
    hint = (
        "every lane must end with the sum over all 32 lanes: five rounds of v += __shfl_xor_sync(0xffffffffu, v, "
        "offset) with offset = 16, 8, 4, 2, 1"
        if device.type == "cuda"
        else "first the mean (sum / n), then the mean of (x - mean)^2; write *mean and *rstd = 1 / sqrt(var + eps)"
    )
    return selfcheck.run(
        f"LayerNorm forward v2, {where}",
        yours,
        reference,
        _inputs,
        device=device,
        hint=hint + "; see kernels/exercises/layernorm_warp_reduce.cuh",
    )
