"""Lesson 01's op, y = a*x^3 + b*x^2 + c*x + d: the autograd wrapper the notebook builds step by step,
and (lesson 04) the real PyTorch op torch.ops.course.polynomial.

    y = polynomial(x, coeffs)             # torch.ops.course.polynomial: autograd in C++, torch.compile-able
    y = polynomial(x, coeffs, version=1)  # lesson 01's Python autograd.Function over forward and backward v1
"""

from __future__ import annotations

import torch

from . import backward_version, call, extension, once


@once
def register() -> None:
    """Load the op (its C++ side defines course::polynomial and course::polynomial_backward with CPU, CUDA
    and Autograd kernels) and register its fake kernels: what torch.compile runs instead of ours while
    tracing, to learn each output's shape, dtype and strides without computing anything."""
    extension("polynomial")

    @torch.library.register_fake("course::polynomial")
    def _(x, coeffs):
        # The kernels' checks that depend only on metadata, in their words: a meta `coeffs` beside a real x
        # comes here (the Meta key wins the dispatch), so this is where "not on x's device" is caught.
        torch._check(
            coeffs.device == x.device,
            lambda: f"coeffs must be on the same device as x ({x.device}), got {coeffs.device}",
        )
        torch._check(coeffs.shape == (4,), lambda: f"coeffs must have shape [4], got {list(coeffs.shape)}")
        return x.new_empty(x.shape)  # contiguous, like the kernel's output

    @torch.library.register_fake("course::polynomial_backward")
    def _(grad_y, x, coeffs, need_coeffs_grad):
        return x.new_empty(x.shape), coeffs.new_empty((4,) if need_coeffs_grad else (0,))


def reference(x: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """Eager PyTorch: 7 kernels (pow, mul, pow, mul, mul, add, add, plus the add of d)."""
    a, b, c, d = coeffs.to(x.dtype).unbind()
    return a * x**3 + b * x**2 + c * x + d


class Polynomial(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, coeffs, ext, version):
        ctx.save_for_backward(x, coeffs)
        ctx.ext, ctx.version = ext, version
        return ext.forward(x, coeffs, version)

    @staticmethod
    def backward(ctx, grad_y):
        x, coeffs = ctx.saved_tensors
        need_x, need_coeffs = ctx.needs_input_grad[:2]
        grad_x, grad_coeffs = ctx.ext.backward(grad_y, x, coeffs, need_coeffs, backward_version(ctx.version, 2))
        if grad_coeffs is not None:
            grad_coeffs = grad_coeffs.to(coeffs.dtype)
        return (grad_x if need_x else None), grad_coeffs, None, None


def polynomial(x: torch.Tensor, coeffs: torch.Tensor, *, ext=None, version: int | None = None) -> torch.Tensor:
    """y = a*x^3 + b*x^2 + c*x + d with coeffs = [a, b, c, d]; differentiable in x and coeffs.

    version=None (the default) is torch.ops.course.polynomial (autograd in C++: the least CPU time per call;
    works under torch.compile); `ext` (a module from loader.load) calls its own build of that op. version=1
    or 2 runs lesson 01's ladder, forward vN and backward vN, through the Python `Polynomial` Function."""
    if version is None:
        if ext is None:
            register()
        return call("polynomial", x, coeffs, ext=ext)
    return Polynomial.apply(x, coeffs, ext or extension("polynomial"), version)


def polynomial_python(x: torch.Tensor, coeffs: torch.Tensor, *, ext=None) -> torch.Tensor:
    """The same op through lesson 01's Python autograd.Function (for comparing per-call overhead)."""
    return Polynomial.apply(x, coeffs, ext or extension("polynomial"), 2)
