"""Self-check for lesson 02's bias-gradient exercise: kernels/exercises/bias_grad.cuh, grad_bias[c] = the sum
over rows of grad_y[r][c] where y[r][c] > 0. It is backward version 3 of the fused op:
`ext.backward_from_mask(grad_y, y, scale, True, 3)` (ext = loader.load("fused_bias_relu")), whose grad_x
is the course's and whose grad_bias is yours. Part 1 (the CPU loop) is checked on the CPU, Part 2 (one
thread per column) on a GPU."""

from __future__ import annotations

import torch

from .. import loader, selfcheck
from . import Wrong, index_without_block

OP = "fused_bias_relu"
VERSION = 3  # backward v3: grad_bias by your kernel


def reference(grad_y: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    g = grad_y.double() * (y.double() > 0)
    return g.reshape(-1, y.shape[-1]).sum(0).to(y.dtype)


def _inputs(shape, dtype, device, g):
    """y = relu(x * scale + bias) for random x, bias and scale (computed here, not by your code), and grad_y."""
    scale = float(torch.empty(()).uniform_(0.25, 3.0, generator=g))
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    bias = torch.randn(shape[-1], generator=g, dtype=torch.float64) * 0.5
    y = torch.relu(x * scale + bias).to(device=device, dtype=dtype)
    grad_y = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return grad_y, y, scale


def _positive_inputs(shape, dtype, device, g):
    """grad_y in [0.5, 1.5): every column's sum grows to about rows / 2, where bfloat16 (8 bits of
    precision) can no longer add the next term."""
    grad_y, y, scale = _inputs(shape, dtype, device, g)
    grad_y = (torch.rand(shape, generator=g) + 0.5).to(device=device, dtype=dtype)
    return grad_y, y, scale


SPECIAL = [
    selfcheck.Case(
        "the rule: add in Acc<T> (float), not in T. A bfloat16 sum over 4096 rows stops growing at a few "
        "hundred (the next term is below half a step of bfloat16 there)",
        (4096, 37),
        torch.bfloat16,
        _positive_inputs,
    ),
    selfcheck.Case("one row: grad_bias is that row of grad_y where y > 0", (1, 300), torch.float32, _inputs),
    selfcheck.Case("many rows, C not a multiple of 32", (5000, 45), torch.float32, _inputs, dict(rtol=1e-5, atol=1e-3)),
]


def _tolerances():
    # float32 sums of up to ~65k terms in another order than float64's
    return {torch.float32: dict(rtol=1e-5, atol=1e-3)}


def check(device=None, ext=None, seed=None) -> int:
    """grad_bias of ext.backward_from_mask(grad_y, y, scale, True, 3) against the float64 sum, on every part
    you wrote: the CPU loop (Part 1), and in CUDA mode your kernel (Part 2)."""
    ext = ext or loader.load(OP)

    def yours(grad_y, y, scale):
        return ext.backward_from_mask(grad_y, y, scale, True, VERSION)[1]

    cases = 0
    with selfcheck.exercise("bias_grad"):
        for dev in selfcheck.parts(device):
            where = "your kernel (Part 2)" if dev.type == "cuda" else "your CPU loop (Part 1)"
            hint = (
                "grad_bias[c] = sum over r < rows of grad_y[r * cols + c] where y[r * cols + c] > 0, in Acc<T>; "
                + (
                    "thread c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, none past cols; "
                    if dev.type == "cuda"
                    else ""
                )
                + "see kernels/exercises/bias_grad.cuh"
            )
            cases += selfcheck.run(
                f"bias gradient (backward v3), {where}",
                yours,
                reference,
                _inputs,
                device=dev,
                seed=seed,
                special=SPECIAL,
                hint=hint,
                tolerances=_tolerances(),
            )
    return cases


_CUDA_LOOP = "if (to_acc(y[r * cols + c]) > 0) sum += to_acc(grad_y[r * cols + c]);"

WRONG = [
    Wrong(
        "no relu': every grad_y is added, also where relu stopped the gradient (y == 0)",
        [("      if (y[r * cols + c] > 0) sum += grad_y[r * cols + c];", "      sum += grad_y[r * cols + c];")],
        "cpu",
    ),
    Wrong(
        "the sum is not reset per column: column c also gets the sums of columns 0..c-1",
        [
            (
                "  for (int64_t c = 0; c < cols; ++c) {\n    T sum = 0;\n",
                "  T sum = 0;\n  for (int64_t c = 0; c < cols; ++c) {\n",
            )
        ],
        "cpu",
    ),
    Wrong(
        "rows and columns swapped in the index (element [r][c] read at c * rows + r)",
        [
            (
                "if (y[r * cols + c] > 0) sum += grad_y[r * cols + c];",
                "if (y[c * rows + r] > 0) sum += grad_y[c * rows + r];",
            )
        ],
        "cpu",
    ),
    Wrong(
        "relu' tested as y >= 0: true everywhere, so nothing is masked",
        [(_CUDA_LOOP, _CUDA_LOOP.replace("> 0)", ">= 0)"))],
        "cuda",
    ),
    Wrong(
        "the sum kept in T: in bfloat16 it stops growing after a few hundred terms",
        [
            ("  Acc<T> sum = 0;", "  T sum = from_acc<T>(0);"),
            (
                _CUDA_LOOP,
                "if (to_acc(y[r * cols + c]) > 0) sum = from_acc<T>(to_acc(sum) + to_acc(grad_y[r * cols + c]));",
            ),
            ("grad_bias[c] = from_acc<T>(sum);", "grad_bias[c] = sum;"),
        ],
        "cuda",
    ),
    index_without_block("const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;", "columns"),
]
