"""Lesson 05's RMSNorm: the plain-PyTorch reference and the real PyTorch op torch.ops.course.rms_norm with
native ``torch.nn.functional.rms_norm``'s arguments, and a drop-in for ``nn.RMSNorm``.

    y = rms_norm(x, (N,), weight)              # F.rms_norm's signature: torch.ops.course.rms_norm
    y = rms_norm(x, (N,), weight, version=1, ext=ext)  # the lesson's Python autograd.Function over v1 kernels
    RMSNorm(N, eps=None, elementwise_affine=True)      # nn.RMSNorm's arguments

The op's C++ side (kernels/rmsnorm/rmsnorm.cpp) defines three ops with CPU, CUDA, Autograd and AutocastCUDA kernels;
here is what only Python adds, the fake kernels torch.compile traces with:

    course::rms_norm(x, normalized_shape, weight?, eps?) -> y
    course::rms_norm_forward(x, normalized_shape, weight?, eps?) -> (y, rstd)
    course::rms_norm_backward(grad_y, x, normalized_shape, rstd, weight?, output_mask) -> (grad_x, grad_weight)

x is [..., *normalized_shape]; weight has shape normalized_shape and x's dtype, or float32 beside a
float16/bfloat16 x, or is None. eps None is native's default, the machine epsilon of the math type
(torch.finfo(torch.float32).eps for float32, float16 and bfloat16 x). y is contiguous with x's shape and
dtype; rstd has x's leading shape, float32 (float64 for float64 x). Backward returns an empty [0] tensor for a
gradient output_mask leaves out; grad_weight has weight's dtype (x's where weight is None).
"""

from __future__ import annotations

import torch

from . import as_shape, backward_version, call, extension, once
from .shapes import acc_dtype, check_grad, check_norm, norm_grads, row_stats


@once
def register() -> None:
    """Load the op (its C++ side defines course::rms_norm, rms_norm_forward and rms_norm_backward) and
    register its fake kernels: what torch.compile runs instead of ours while tracing."""
    extension("rmsnorm")

    @torch.library.register_fake("course::rms_norm_forward")
    def _(x, normalized_shape, weight, eps):
        check_norm(x, normalized_shape, weight=weight)
        return x.new_empty(x.shape), row_stats(x, normalized_shape)

    @torch.library.register_fake("course::rms_norm")
    def _(x, normalized_shape, weight, eps):
        check_norm(x, normalized_shape, weight=weight)
        return x.new_empty(x.shape)

    @torch.library.register_fake("course::rms_norm_backward")
    def _(grad_y, x, normalized_shape, rstd, weight, output_mask):
        check_norm(x, normalized_shape, weight=weight)
        check_grad(grad_y, x)
        return norm_grads(x, normalized_shape, output_mask, weight)


def reference(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None, eps: float | None = None):
    """Eager PyTorch, written out in the math type: the mean of squares, rsqrt, scale (several kernels)."""
    dims = tuple(range(-len(as_shape(normalized_shape)), 0))
    xf = x.to(acc_dtype(x.dtype))
    if eps is None:
        eps = torch.finfo(xf.dtype).eps
    y = xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(xf.dtype)
    return y.to(x.dtype)


class RmsNormFunction(torch.autograd.Function):
    """The lesson's autograd wrapper around the pybind module's forward and backward (any version)."""

    @staticmethod
    def forward(ctx, x, weight, eps, ext, version):
        y, rstd = ext.forward(x, weight, eps, version)
        ctx.save_for_backward(x, weight, rstd)
        ctx.ext, ctx.version = ext, version
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, rstd = ctx.saved_tensors
        grad_x, grad_w = ctx.ext.backward(grad_y, x, rstd, weight, backward_version(ctx.version, 2))
        need = ctx.needs_input_grad
        return (grad_x if need[0] else None), (grad_w if need[1] else None), None, None, None


def rms_norm(
    x: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
    *,
    ext=None,
    version: int | None = None,
) -> torch.Tensor:
    """``F.rms_norm(x, normalized_shape, weight, eps)`` on our kernels, differentiable in x and weight.

    version=None (the default) is torch.ops.course.rms_norm (forward v2, backward v2, autograd in C++; works
    under torch.compile and autocast); `ext` (a module from loader.load) calls its own build of that op.
    version=1 or 2 runs lesson 05's ladder, forward vN and backward vN, through the Python RmsNormFunction
    (over the last dimension only)."""
    shape = as_shape(normalized_shape)
    if version is None:
        register()
        return call("rms_norm", x, shape, weight, eps, ext=ext)
    if len(shape) != 1:
        raise ValueError(f"rms_norm version {version} normalizes the last dimension only, got normalized_shape {shape}")
    return RmsNormFunction.apply(x, weight, eps, ext or extension("rmsnorm"), version)


class RMSNorm(torch.nn.Module):
    """Our kernels behind ``nn.RMSNorm``'s interface: the same arguments, parameter, initialization,
    state_dict and repr; forward is course::rms_norm."""

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(
        self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None, dtype=None
    ):
        super().__init__()
        register()
        self.normalized_shape = as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            torch.nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)
