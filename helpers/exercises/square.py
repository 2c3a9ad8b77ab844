"""Self-check for the lesson 02 exercise: kernels/exercises/square.cuh, y = x * x and its backward, used by
the C++ autograd Function SquareFunction in kernels/fused_bias_relu.cpp (`ext.square`)."""

from __future__ import annotations

import torch

from .. import env as _env
from .. import loader, selfcheck


def reference(x: torch.Tensor, grad_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xd = x.double()
    return (xd * xd).to(x.dtype), (2 * xd * grad_y.double()).to(x.dtype)


def _inputs(shape, dtype, device, g):
    x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    grad_y = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return x, grad_y


def check(device=None, ext=None) -> int:
    """ext.square forward (output 0) and backward through autograd (output 1) against the reference:
    the CPU loops in CPU mode, the CUDA kernels on a GPU."""
    device = _env.default_device(device)
    ext = ext or loader.load("fused_bias_relu")

    def yours(x, grad_y):
        x = x.detach().requires_grad_()
        y = ext.square(x)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return y.detach(), grad_x

    where = "the CUDA kernels (Part 2)" if device.type == "cuda" else "the CPU loops (Part 1)"
    return selfcheck.run(
        f"square forward and backward, {where}",
        yours,
        reference,
        _inputs,
        device=device,
        hint="output 0 is y[i] = x[i] * x[i], output 1 is grad_x[i] = 2 * x[i] * grad_y[i], for every i < n; "
        "see kernels/exercises/square.cuh",
    )
