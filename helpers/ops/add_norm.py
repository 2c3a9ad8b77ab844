"""Lesson 05's fused residual add + norm, the pre-norm transformer's hot path: ``h = x + residual; y =
norm(h)``, returning (y, h), as real PyTorch ops for RMSNorm and LayerNorm.

    y, h = add_rms_norm(x, residual, (N,), weight)            # torch.ops.course.add_rms_norm
    y, h = add_layer_norm(x, residual, (N,), weight, bias)    # torch.ops.course.add_layer_norm

The C++ side (kernels/add_norm/add_norm.cpp) defines the ops with CPU, CUDA, Autograd and AutocastCUDA kernels; here
are their fake kernels and the public calls, which promote x and residual to one dtype and broadcast them to
one shape first, as `x + residual` does:

    course::add_rms_norm(x, residual, normalized_shape, weight?, eps?) -> (y, h)
    course::add_rms_norm_forward(same) -> (y, h, rstd)
    course::add_rms_norm_backward(grad_y, grad_h?, h, normalized_shape, rstd, weight?, output_mask)
        -> (grad_input, grad_weight)
    course::add_layer_norm(x, residual, normalized_shape, weight?, bias?, eps) -> (y, h)
    course::add_layer_norm_forward(same) -> (y, h, mean, rstd)
    course::add_layer_norm_backward(grad_y, grad_h?, h, normalized_shape, mean, rstd, weight?, bias?,
        output_mask) -> (grad_input, grad_weight, grad_bias)

grad_input is the gradient of x and of residual alike. Parameters and eps as helpers/ops/rmsnorm.py and
helpers/ops/layernorm.py take them; y and h are contiguous with x's shape and dtype, the statistics float32
(float64 for float64) with x's leading shape.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import as_shape, call, extension, once
from .shapes import check_norm, norm_grads, row_stats


def _check_residual(x, residual) -> None:
    torch._check(
        residual.shape == x.shape, lambda: f"residual must have shape {list(x.shape)}, got {list(residual.shape)}"
    )


@once
def register() -> None:
    """Load the ops (kernels/add_norm/add_norm.cpp defines them) and register their fake kernels."""
    extension("add_norm")

    @torch.library.register_fake("course::add_rms_norm_forward")
    def _(x, residual, normalized_shape, weight, eps):
        check_norm(x, normalized_shape, weight=weight)
        _check_residual(x, residual)
        return x.new_empty(x.shape), x.new_empty(x.shape), row_stats(x, normalized_shape)

    @torch.library.register_fake("course::add_rms_norm")
    def _(x, residual, normalized_shape, weight, eps):
        check_norm(x, normalized_shape, weight=weight)
        _check_residual(x, residual)
        return x.new_empty(x.shape), x.new_empty(x.shape)

    @torch.library.register_fake("course::add_rms_norm_backward")
    def _(grad_y, grad_h, h, normalized_shape, rstd, weight, output_mask):
        check_norm(h, normalized_shape, weight=weight)
        return norm_grads(h, normalized_shape, output_mask, weight)

    @torch.library.register_fake("course::add_layer_norm_forward")
    def _(x, residual, normalized_shape, weight, bias, eps):
        check_norm(x, normalized_shape, weight=weight, bias=bias)
        _check_residual(x, residual)
        return (
            x.new_empty(x.shape),
            x.new_empty(x.shape),
            row_stats(x, normalized_shape),
            row_stats(x, normalized_shape),
        )

    @torch.library.register_fake("course::add_layer_norm")
    def _(x, residual, normalized_shape, weight, bias, eps):
        check_norm(x, normalized_shape, weight=weight, bias=bias)
        _check_residual(x, residual)
        return x.new_empty(x.shape), x.new_empty(x.shape)

    @torch.library.register_fake("course::add_layer_norm_backward")
    def _(grad_y, grad_h, h, normalized_shape, mean, rstd, weight, bias, output_mask):
        check_norm(h, normalized_shape, weight=weight, bias=bias)
        return norm_grads(h, normalized_shape, output_mask, weight, bias)


def _promoted(x, residual):
    """x and residual as `x + residual` takes them: one dtype (promoted) and one shape (broadcast); the ops
    themselves take one dtype and one shape."""
    dtype = torch.promote_types(x.dtype, residual.dtype)
    x, residual = x.to(dtype), residual.to(dtype)
    if x.shape != residual.shape:
        x, residual = torch.broadcast_tensors(x, residual)
    return x, residual


def add_rms_norm(x, residual, normalized_shape, weight=None, eps=None):
    """(y, h): h = x + residual, y = ``F.rms_norm(h, normalized_shape, weight, eps)``, in one kernel each way;
    differentiable in x, residual and weight, through y and h."""
    register()
    x, residual = _promoted(x, residual)
    return call("add_rms_norm", x, residual, as_shape(normalized_shape), weight, eps)


def add_layer_norm(x, residual, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """(y, h): h = x + residual, y = ``F.layer_norm(h, normalized_shape, weight, bias, eps)``, in one kernel
    each way; differentiable in x, residual, weight and bias, through y and h."""
    register()
    x, residual = _promoted(x, residual)
    return call("add_layer_norm", x, residual, as_shape(normalized_shape), weight, bias, eps)


def reference_rms(x, residual, normalized_shape, weight=None, eps=None):
    """The unfused pair in plain PyTorch: an add, then native rms_norm."""
    h = x + residual
    return F.rms_norm(h, as_shape(normalized_shape), weight, eps), h


def reference_layer(x, residual, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """The unfused pair in plain PyTorch: an add, then native layer_norm."""
    h = x + residual
    return F.layer_norm(h, as_shape(normalized_shape), weight, bias, eps), h
