"""Self-check for lesson 01's second exercise: kernels/exercises/polynomial_backward.cuh, backward version 1
(grad_x of y = a*x^3 + b*x^2 + c*x + d; Part 1: the CPU loop; Part 2: the CUDA kernel)."""

from __future__ import annotations

import torch

from .. import loader, selfcheck
from . import Wrong, index_in_32_bits, index_without_block, loop_one_short
from .polynomial_forward import coeffs

OP = "polynomial"
NAME = "polynomial_backward"
HINT = (
    "grad_x[i] = grad_y[i] * ((3*a*x + 2*b)*x + c) with a, b, c = coeffs[0], coeffs[1], coeffs[2] (the check "
    "draws new coefficients every run), for every i < n; see kernels/exercises/polynomial_backward.cuh"
)


def reference(x: torch.Tensor, grad_y: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    a, b, cc, _ = c.double().unbind()
    xd = x.double()
    return (grad_y.double() * ((3 * a * xd + 2 * b) * xd + cc)).to(x.dtype)


def _inputs(shape, dtype, device, g):
    x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    grad_y = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return x, grad_y, coeffs(g, device)


def _large_inputs(numel, dtype, device, g):
    x = torch.randn(numel, generator=g, device=device, dtype=dtype)
    grad_y = torch.randn(numel, generator=g, device=device, dtype=dtype)
    return x, grad_y, coeffs(g, device)


def check(device=None, ext=None, seed=None) -> int:
    """Backward version 1 (grad_x) against the reference on every part you wrote: the CPU loop (Part 1), and
    on a GPU machine also the CUDA kernel (Part 2), including a tensor of more than 2^31 elements."""
    ext = ext or loader.load(OP)

    def yours(x, grad_y, c):
        return ext.backward(grad_y, x, c, False, 1)[0]

    return selfcheck.elementwise(
        NAME,
        "polynomial backward v1",
        yours,
        reference,
        _inputs,
        _large_inputs,
        buffers=3,
        device=device,
        seed=seed,
        hint=HINT,
    )


_CPU_LINE = "grad_x[i] = grad_y[i] * ((3 * a * x[i] + 2 * b) * x[i] + c);"
_CUDA_INDEX = "const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;"

WRONG = [
    Wrong(
        "dy/dx without the factor 3 of 3*a*x^2 (the derivative of a*x^3)",
        [(_CPU_LINE, "grad_x[i] = grad_y[i] * ((a * x[i] + 2 * b) * x[i] + c);")],
        "cpu",
    ),
    Wrong(
        "dy/dx alone, not multiplied by grad_y (the chain rule: dL/dx = dL/dy * dy/dx)",
        [(_CPU_LINE, "grad_x[i] = (3 * a * x[i] + 2 * b) * x[i] + c;")],
        "cpu",
    ),
    loop_one_short("for (int64_t i = 0; i < n; ++i) {"),
    index_without_block(_CUDA_INDEX),
    index_in_32_bits(_CUDA_INDEX, buffers=3),
    Wrong(
        "dy/dx without the factor 2 of 2*b*x (the derivative of b*x^2)",
        [("(3 * coeffs[0] * v + 2 * coeffs[1])", "(3 * coeffs[0] * v + coeffs[1])")],
        "cuda",
    ),
]
