"""The shape rules the fake kernels share (what torch.compile checks while tracing, sizes only, no data): the
norms' arguments (kernels/common/norm_ops.h on the C++ side) and the statistics they save."""

from __future__ import annotations

import torch


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a norm accumulates and saves its statistics in: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_norm(x, normalized_shape, **params) -> None:
    """x is [..., *normalized_shape]; each parameter given (weight=..., bias=...; None allowed) has shape
    normalized_shape and x's device. The messages are the C++ checks' own."""
    k = len(normalized_shape)
    torch._check(k >= 1, lambda: "normalized_shape must have at least one dimension, got []")
    torch._check(
        x.dim() >= k and tuple(x.shape[x.dim() - k :]) == tuple(normalized_shape),
        lambda: (
            f"x's last dimensions must be normalized_shape {list(normalized_shape)}, got x of shape {list(x.shape)}"
        ),
    )
    for name, p in params.items():
        if p is not None:
            torch._check(
                p.device == x.device, lambda: f"{name} must be on the same device as x ({x.device}), got {p.device}"
            )
            torch._check(
                tuple(p.shape) == tuple(normalized_shape),
                lambda: f"{name} must have shape {list(normalized_shape)}, got {list(p.shape)}",
            )


def check_grad(grad_y, x) -> None:
    torch._check(grad_y.shape == x.shape, lambda: f"grad_y must have shape {list(x.shape)}")


def row_stats(x, normalized_shape) -> torch.Tensor:
    """An empty per-row statistic (mean or rstd): x's leading shape, in acc_dtype(x.dtype)."""
    return x.new_empty(x.shape[: x.dim() - len(normalized_shape)], dtype=acc_dtype(x.dtype))


def param_dtype(x, *params) -> torch.dtype:
    """The dtype of the parameters' gradients: the first parameter's, x's when every one is None."""
    return next((p.dtype for p in params if p is not None), x.dtype)


def norm_grads(x, normalized_shape, output_mask, *params) -> tuple:
    """A norm backward's outputs: grad_x, then one gradient per parameter (weight, bias), each an empty [0]
    tensor where output_mask leaves it out; the parameters' gradients in param_dtype."""
    dtype = param_dtype(x, *params)
    grad_x = x.new_empty(x.shape if output_mask[0] else (0,))
    return (grad_x, *(x.new_empty(normalized_shape if want else (0,), dtype=dtype) for want in output_mask[1:]))
