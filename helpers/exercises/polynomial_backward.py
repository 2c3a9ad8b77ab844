"""Self-check for the lesson 01 exercise: kernels/exercises/polynomial_backward.cuh (backward version 1)."""

from __future__ import annotations

import torch

from .. import env as _env
from .. import loader, selfcheck

COEFFS = (1.5, 0.5, -2.0, 0.25)


def reference(x: torch.Tensor, grad_y: torch.Tensor) -> torch.Tensor:
    a, b, c, _ = COEFFS
    xd = x.double()
    return (grad_y.double() * (3 * a * xd**2 + 2 * b * xd + c)).to(x.dtype)


def _inputs(shape, dtype, device, g):
    x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    grad_y = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return x, grad_y


def check(device=None, ext=None) -> int:
    """Your backward (version 1) against the reference: CPU loop in CPU mode, CUDA kernel on a GPU."""
    device = _env.default_device(device)
    ext = ext or loader.load("polynomial")
    coeffs = torch.tensor(COEFFS, device=device)

    def yours(x, grad_y):
        return ext.backward(grad_y, x, coeffs, False, 1)[0]

    where = "the CUDA kernel (Part 2)" if device.type == "cuda" else "the CPU loop (Part 1)"
    return selfcheck.run(
        f"polynomial backward, {where}",
        yours,
        reference,
        _inputs,
        device=device,
        hint="grad_x[i] = grad_y[i] * ((3*a*x + 2*b)*x + c), for every i < n; see "
        "kernels/exercises/polynomial_backward.cuh",
    )
