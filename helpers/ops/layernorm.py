"""Lesson 03's op, LayerNorm: the plain-PyTorch reference, the autograd wrapper the notebook builds, and
(lesson 04) the real PyTorch op torch.ops.course.layer_norm with native layer_norm's arguments, and a
drop-in for ``nn.LayerNorm``.

    y = layer_norm(x, weight, bias)                      # over the last dimension: torch.ops.course.layer_norm
    y = layer_norm(x, weight, bias, version=1, ext=ext)  # lesson 03's Python autograd.Function over forward v1
    y = layer_norm_like_native(x, (4, 8), weight, None)  # F.layer_norm's signature: any trailing dims, None
    LayerNorm((4, 8), elementwise_affine=True, bias=False)  # nn.LayerNorm's arguments

The op's C++ side (kernels/layernorm/layernorm.cpp and layernorm.autograd.cpp) defines three ops with CPU, CUDA, Autograd and (CUDA) Autocast
kernels; their CUDA kernels run what kernels/layernorm/layernorm.route.cu picks (the norm engine or lesson
03's ladder). Here is what only Python adds, the fake kernels torch.compile traces with:

    course::layer_norm(x, normalized_shape, weight?, bias?, eps) -> y
    course::layer_norm_forward(x, normalized_shape, weight?, bias?, eps) -> (y, mean, rstd)
    course::layer_norm_backward(grad_y, x, normalized_shape, mean, rstd, weight?, bias?, output_mask)
        -> (grad_x, grad_weight, grad_bias)

x is [..., *normalized_shape]; weight and bias have shape normalized_shape, x's dtype, or float32 for a
float16/bfloat16 x (as native allows); each may be None. y is contiguous with x's shape and dtype; mean and
rstd have x's leading shape x.shape[:-len(normalized_shape)], contiguous, float32 (float64 for float64 x).
Backward returns an empty [0] tensor for each gradient output_mask leaves out; grad_weight and grad_bias have
the parameters' dtype (x's where both are None).
"""

from __future__ import annotations

import torch

from . import as_shape, backward_version, call, extension, once
from .shapes import check_grad, check_norm, norm_grads, row_stats


@once
def register() -> None:
    """Load the op (its C++ side defines course::layer_norm, layer_norm_forward and layer_norm_backward with
    CPU, CUDA, Autograd and AutocastCUDA kernels) and register its fake kernels: what torch.compile runs
    instead of ours while tracing, to learn each output's shape, dtype and strides without computing."""
    extension("layernorm")

    @torch.library.register_fake("course::layer_norm_forward")
    def _(x, normalized_shape, weight, bias, eps):
        check_norm(x, normalized_shape, weight=weight, bias=bias)
        return x.new_empty(x.shape), row_stats(x, normalized_shape), row_stats(x, normalized_shape)

    @torch.library.register_fake("course::layer_norm")
    def _(x, normalized_shape, weight, bias, eps):
        check_norm(x, normalized_shape, weight=weight, bias=bias)
        return x.new_empty(x.shape)  # contiguous, like the kernel's output

    @torch.library.register_fake("course::layer_norm_backward")
    def _(grad_y, x, normalized_shape, mean, rstd, weight, bias, output_mask):
        check_norm(x, normalized_shape, weight=weight, bias=bias)
        check_grad(grad_y, x)
        return norm_grads(x, normalized_shape, output_mask, weight, bias)


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Eager PyTorch, written out: a mean, a variance (two-pass), normalize, scale and shift (~8 kernels)."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


class LayerNormFunction(torch.autograd.Function):
    """Lesson 03's autograd wrapper around the pybind module's forward and backward (any version)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, ext, version):
        y, mean, rstd = ext.forward(x, weight, bias, eps, version)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.ext, ctx.version = ext, version
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, mean, rstd = ctx.saved_tensors
        grad_x, grad_w, grad_b = ctx.ext.backward(grad_y, x, mean, rstd, weight, backward_version(ctx.version, 2))
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
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    ext=None,
    version: int | None = None,
) -> torch.Tensor:
    """LayerNorm of x over its last dimension; differentiable in x, weight and bias.

    version=None (the default) is torch.ops.course.layer_norm: on the GPU the kernels the op's route picks
    (kernels/layernorm/layernorm.route.cu: the norm engine where its table says so, else the ladder's forward
    v3 and backward v2 with kernel "auto"; ``ext.describe(x)`` names them), autograd in C++ (the least CPU
    time per call); works under torch.compile and autocast; weight and bias may be None. `ext` (a module from
    loader.load) calls its own build of that op. version=1, 2 or 3 runs lesson 03's ladder alone, forward vN
    and backward vN (v2 for version 3: the ladder's last), through the Python LayerNormFunction."""
    if version is None:
        if ext is None:
            register()
        return call("layer_norm", x, tuple(x.shape[-1:]), weight, bias, eps, ext=ext)
    if weight is None or bias is None:
        raise ValueError(
            f"layer_norm version {version} (lesson 03's Python Function) takes weight and bias tensors; "
            "None for either needs version=None (the registered op)"
        )
    return LayerNormFunction.apply(x, weight, bias, eps, ext or extension("layernorm"), version)


def layer_norm_like_native(
    x: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``F.layer_norm(x, normalized_shape, weight, bias, eps)`` on our kernels: x is normalized over its
    trailing dimensions normalized_shape (an int or a sequence); weight and bias have that shape, or None."""
    register()
    return call("layer_norm", x, as_shape(normalized_shape), weight, bias, eps)


class LayerNorm(torch.nn.Module):
    """Our kernels behind ``nn.LayerNorm``'s interface: the same arguments, parameters, initialization,
    state_dict and repr; forward is course::layer_norm."""

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        register()
        factory = {"device": device, "dtype": dtype}
        self.normalized_shape = as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, **factory))
            if bias:
                self.bias = torch.nn.Parameter(torch.empty(self.normalized_shape, **factory))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            torch.nn.init.ones_(self.weight)
            if self.bias is not None:
                torch.nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm_like_native(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
