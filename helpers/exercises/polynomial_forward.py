"""Self-check for lesson 01's first exercise: kernels/exercises/polynomial_forward.cuh, forward version 1 of
y = a*x^3 + b*x^2 + c*x + d (Part 1: the CPU loop; Part 2: the CUDA kernel, one thread per element)."""

from __future__ import annotations

import torch

from .. import loader, selfcheck
from . import Wrong, index_in_32_bits, index_without_block, loop_one_short

OP = "polynomial"
NAME = "polynomial_forward"
HINT = (
    "y[i] = ((a*x + b)*x + c)*x + d with a, b, c, d = coeffs[0], coeffs[1], coeffs[2], coeffs[3] (the check "
    "draws new coefficients every run), for every i < n; see kernels/exercises/polynomial_forward.cuh"
)


def coeffs(g: torch.Generator, device) -> torch.Tensor:
    """[a, b, c, d], each uniform in [-2, 2), drawn from `g`: new coefficients in every case and every run."""
    return (torch.rand(4, generator=g, device=g.device) * 4 - 2).to(device)


def reference(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    a, b, cc, d = c.double().unbind()
    xd = x.double()
    return (((a * xd + b) * xd + cc) * xd + d).to(x.dtype)


def _inputs(shape, dtype, device, g):
    x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return x, coeffs(g, device)


def _large_inputs(numel, dtype, device, g):
    return torch.randn(numel, generator=g, device=device, dtype=dtype), coeffs(g, device)


def check(device=None, ext=None, seed=None) -> int:
    """Forward version 1 against the reference on every part you wrote: the CPU loop (Part 1), and on a
    GPU machine also the CUDA kernel (Part 2), including a tensor of more than 2^31 elements."""
    ext = ext or loader.load(OP)

    def yours(x, c):
        return ext.forward(x, c, 1)

    return selfcheck.elementwise(
        NAME,
        "polynomial forward v1",
        yours,
        reference,
        _inputs,
        _large_inputs,
        buffers=2,
        device=device,
        seed=seed,
        hint=HINT,
    )


_CPU_COEFFS = "const T a = coeffs[0], b = coeffs[1], c = coeffs[2], d = coeffs[3];"
_CUDA_INDEX = "const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;"
_CUDA_HORNER = "((coeffs[0] * v + coeffs[1]) * v + coeffs[2]) * v + coeffs[3]"

WRONG = [
    loop_one_short("for (int64_t i = 0; i < n; ++i) {"),
    Wrong(
        "the lesson's example coefficients typed in (1.5, 0.5, -2, 0.25) instead of read from coeffs",
        [(_CPU_COEFFS, "const T a = 1.5, b = 0.5, c = -2, d = 0.25;")],
        "cpu",
    ),
    Wrong(
        "Horner's rule without the constant term d",
        [("y[i] = ((a * x[i] + b) * x[i] + c) * x[i] + d;", "y[i] = ((a * x[i] + b) * x[i] + c) * x[i];")],
        "cpu",
    ),
    index_without_block(_CUDA_INDEX),
    index_in_32_bits(_CUDA_INDEX, buffers=2),
    Wrong(
        "the coefficients read in reverse order (coeffs = [a, b, c, d]: a multiplies x^3)",
        [(_CUDA_HORNER, "((coeffs[3] * v + coeffs[2]) * v + coeffs[1]) * v + coeffs[0]")],
        "cuda",
    ),
]
