"""Self-check for lesson 02's first exercise: kernels/exercises/square.cuh, y = x * x and its backward, which
kernels/square/square.cpp wraps in the C++ autograd Function SquareFunction (`ext.square(x, 1)`, ext =
loader.load("square")). Part 1 (the CPU loops) is checked on the CPU, Part 2 (the CUDA kernels) on a GPU."""

from __future__ import annotations

import torch

from .. import loader, selfcheck
from . import Wrong, index_in_32_bits, index_without_block, loop_one_short

OP = "square"
VERSION = 1  # square v1: your kernels (v2 is the course's)


def reference(x: torch.Tensor, grad_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xd = x.double()
    return (xd * xd).to(x.dtype), (2 * xd * grad_y.double()).to(x.dtype)


def _inputs(shape, dtype, device, g):
    spread = float(torch.empty(()).uniform_(0.5, 4.0, generator=g))  # the values' magnitude, drawn per case
    x = (torch.randn(shape, generator=g) * spread).to(device=device, dtype=dtype)
    grad_y = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return x, grad_y


def _large_inputs(n, dtype, device, g):
    return (torch.randn(n, device=device, dtype=dtype, generator=g),)


def _large_backward_inputs(n, dtype, device, g):
    return tuple(torch.randn(n, device=device, dtype=dtype, generator=g) for _ in range(2))


def check(device=None, ext=None, seed=None) -> int:
    """ext.square(x, 1) forward (output 0) and its backward through autograd (output 1) against the reference,
    on every part you wrote: the CPU loops (Part 1), and in CUDA mode the kernels (Part 2), which must also be
    right past element 2^31 where the GPU has the memory."""
    ext = ext or loader.load(OP)

    def yours(x, grad_y):
        x = x.detach().requires_grad_()
        y = ext.square(x, VERSION)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return y.detach(), grad_x

    cases = 0
    with selfcheck.exercise("square"):
        for dev in selfcheck.parts(device):
            where = "the CUDA kernels (Part 2)" if dev.type == "cuda" else "the CPU loops (Part 1)"
            hint = (
                "output 0 is y[i] = x[i] * x[i], output 1 is grad_x[i] = 2 * x[i] * grad_y[i], for every i < n"
                + ("; i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x" if dev.type == "cuda" else "")
                + "; see kernels/exercises/square.cuh"
            )
            cases += selfcheck.run(
                f"square forward and backward, {where}", yours, reference, _inputs, device=dev, seed=seed, hint=hint
            )
            if dev.type == "cuda":
                selfcheck.large_case(
                    "square forward (Part 2)",
                    lambda x: ext.forward(x, VERSION),
                    lambda x: reference(x, x)[0],
                    _large_inputs,
                    buffers=2,
                    hint=hint,
                    seed=seed,
                )
                selfcheck.large_case(
                    "square backward (Part 2)",
                    lambda g, x: ext.backward(g, x, VERSION),
                    lambda g, x: reference(x, g)[1],
                    _large_backward_inputs,
                    buffers=3,
                    hint=hint,
                    seed=seed,
                )
    return cases


_FWD_CUDA = "const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;\n  if (i >= n) return;\n  const Acc<T> v"

WRONG = [
    loop_one_short("for (int64_t i = 0; i < n; ++i) y[i]"),
    Wrong(
        "backward without the factor 2 of d(x^2)/dx = 2x",
        [("grad_x[i] = 2 * x[i] * grad_y[i];", "grad_x[i] = x[i] * grad_y[i];")],
        "cpu",
    ),
    Wrong(
        "backward returns d(x^2)/dx = 2x, forgetting the chain rule's grad_y",
        [("grad_x[i] = 2 * x[i] * grad_y[i];", "grad_x[i] = 2 * x[i];")],
        "cpu",
    ),
    index_without_block(_FWD_CUDA),
    index_in_32_bits(_FWD_CUDA, buffers=2),
    Wrong(
        "backward kernel without the factor 2",
        [("from_acc<T>(2 * to_acc(x[i]) * to_acc(grad_y[i]))", "from_acc<T>(to_acc(x[i]) * to_acc(grad_y[i]))")],
        "cuda",
    ),
    Wrong(
        "backward kernel forgets grad_y (the chain rule)",
        [("from_acc<T>(2 * to_acc(x[i]) * to_acc(grad_y[i]))", "from_acc<T>(2 * to_acc(x[i]))")],
        "cuda",
    ),
]
