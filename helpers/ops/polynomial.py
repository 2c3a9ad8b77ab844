"""Lesson 01's op, y = a*x^3 + b*x^2 + c*x + d: the autograd wrapper the notebook builds step by step."""

from __future__ import annotations

import torch

from . import extension


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
        grad_x, grad_coeffs = ctx.ext.backward(grad_y, x, coeffs, need_coeffs, 2)
        if grad_coeffs is not None:
            grad_coeffs = grad_coeffs.to(coeffs.dtype)
        return (grad_x if need_x else None), grad_coeffs, None, None


def polynomial(x: torch.Tensor, coeffs: torch.Tensor, *, ext=None, version: int = 2) -> torch.Tensor:
    """y = a*x^3 + b*x^2 + c*x + d with coeffs = [a, b, c, d]; differentiable in x and coeffs.

    Version 2 uses the extension's C++ autograd Function (least CPU time per call); version 1 goes
    through the Python `Polynomial` Function with forward v1."""
    ext = ext or extension("polynomial")
    if version == 2:
        return ext.polynomial(x, coeffs)
    return Polynomial.apply(x, coeffs, ext, version)


def polynomial_python(x: torch.Tensor, coeffs: torch.Tensor, *, ext=None) -> torch.Tensor:
    """The same op through lesson 01's Python autograd.Function (for comparing per-call overhead)."""
    return Polynomial.apply(x, coeffs, ext or extension("polynomial"), 2)
