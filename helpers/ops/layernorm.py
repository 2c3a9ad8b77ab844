"""Lesson 03's op, LayerNorm over the last dimension: the plain-PyTorch reference, the autograd wrapper the
notebook builds, and a drop-in for ``nn.LayerNorm(n)`` (elementwise affine, normalized over the last dim)."""

from __future__ import annotations

import torch

from . import extension


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Eager PyTorch, written out: a mean, a variance (two-pass), normalize, scale and shift (~8 kernels)."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, ext, version):
        y, mean, rstd = ext.forward(x, weight, bias, eps, version)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.ext = ext
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, mean, rstd = ctx.saved_tensors
        grad_x, grad_w, grad_b = ctx.ext.backward(grad_y, x, mean, rstd, weight, 2)
        need = ctx.needs_input_grad
        return (
            (grad_x if need[0] else None),
            (grad_w if need[1] else None),
            (grad_b if need[2] else None),
            None,
            None,
            None,
        )


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5, *, ext=None, version: int = 3
) -> torch.Tensor:
    """LayerNorm of x over its last dimension; differentiable in x, weight and bias."""
    return LayerNormFunction.apply(x, weight, bias, eps, ext or extension("layernorm"), version)


class LayerNorm(torch.nn.Module):
    """Our kernels behind the interface of ``nn.LayerNorm(n, eps)`` (weight 1, bias 0 at the start)."""

    def __init__(self, n: int, eps: float = 1e-5, *, device=None, dtype=None):
        super().__init__()
        self.normalized_shape, self.eps = (n,), eps
        self.weight = torch.nn.Parameter(torch.ones(n, device=device, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(n, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape[0]}, eps={self.eps}"
