"""Lesson 05's RMSNorm followed by dropout, fused: one CUDA kernel computes the row statistic, normalizes,
scales by the weight, draws the Philox mask and writes y once (kernels/norm_dropout/norm_dropout.cu, kernels/norm_dropout/norm_dropout.cpp).

    y = rms_norm_dropout(x, (N,), weight, p=0.1)           # dropout(rms_norm(x, (N,), weight), 0.1), differentiable
    y = rms_norm_dropout(x, (N,), weight, p=0.1, train=False)   # eval mode: rms_norm alone
    layer = RMSNormDropout(N, p=0.1)                       # nn.RMSNorm's arguments and p; model.eval() turns
                                                           # the dropout off
    y, rstd, rng_state = torch.ops.course.rms_norm_dropout(x, [N], weight, None, 0.1, True)

The mask is course::dropout's (helpers/ops/dropout.py): drawn from PyTorch's generator (torch.manual_seed
reproduces it, a captured CUDA graph draws a new one at every replay), flat element i kept iff
philox::keep(seed, offset, i, drop_threshold(p)), regenerated in backward from rng_state instead of stored.
So y is course::dropout(course::rms_norm(x)) drawn at the same (seed, offset), a kept value rounded to x's
dtype once instead of twice. The op's backward (v1): course::dropout_backward, then course::rms_norm_backward;
the fused backward v2 (one pass, 3*M*N elements instead of 5*M*N) is the module's, not yet the op's:

    ext = extension("norm_dropout")
    grad_x, grad_w = ext.backward(grad_y, x, rstd, weight, rng_state, p, version=2)
"""

from __future__ import annotations

import torch
from torch import nn

from . import as_shape, call, extension, once
from . import dropout as _dropout
from . import rmsnorm as _rmsnorm
from .shapes import check_grad, check_norm, norm_grads, row_stats


@once
def register() -> None:
    """Load the op and the two ops its forward (eval mode) and backward call (course::rms_norm_forward,
    course::dropout_backward, course::rms_norm_backward), and register its fake kernel.

    course::rms_norm_dropout(x, normalized_shape, weight?, eps?, p, train, generator=None) -> (y, rstd, rng_state)
    """
    _rmsnorm.register()
    _dropout.register()
    extension("norm_dropout")
    _dropout._never_merged(torch.ops.course.rms_norm_dropout)

    @torch.library.register_fake("course::rms_norm_dropout")
    def _(x, normalized_shape, weight, eps, p, train, generator=None):
        torch._check_type(
            x.dtype in _dropout.FLOATING,
            lambda: f"x must be float32, float64, float16 or bfloat16, got {_dropout._C10_NAMES.get(x.dtype, x.dtype)}",
        )
        check_norm(x, normalized_shape, weight=weight)
        _dropout.check_p(p)
        return x.new_empty(x.shape), row_stats(x, normalized_shape), x.new_empty((2,), dtype=torch.int64)

    @torch.library.register_fake("course::rms_norm_dropout_backward")
    def _(grad_y, x, normalized_shape, rstd, weight, rng_state, p, output_mask):
        check_norm(x, normalized_shape, weight=weight)
        check_grad(grad_y, x)
        _dropout.check_p(p)
        torch._check_value(
            rng_state.shape == (2,), lambda: f"rng_state must have shape [2], got {list(rng_state.shape)}"
        )
        return norm_grads(x, normalized_shape, output_mask, weight)


def rms_norm_dropout(
    x: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
    p: float = 0.5,
    train: bool = True,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``F.dropout(F.rms_norm(x, normalized_shape, weight, eps), p, train)`` in one kernel, differentiable in
    x and weight; the mask from `generator` (on x's device) or the default generator of x's device."""
    _dropout.check_p(p)
    register()
    shape = as_shape(normalized_shape)
    return call("rms_norm_dropout", x, shape, weight, eps, float(p), bool(train), generator)[0]


def reference(x: torch.Tensor, normalized_shape, weight=None, eps=None, p: float = 0.5, train: bool = True):
    """Native PyTorch, unfused: F.rms_norm then F.dropout (its own generator stream and mask layout: the same
    statistics, other bits)."""
    shape = as_shape(normalized_shape)
    return torch.nn.functional.dropout(torch.nn.functional.rms_norm(x, shape, weight, eps), p, train)


def unfused(x: torch.Tensor, normalized_shape, weight=None, eps=None, p: float = 0.5, train: bool = True):
    """The course's two ops one after the other: course::rms_norm, then course::dropout (the same mask as the
    fused op when drawn at the same generator state)."""
    return _dropout.dropout(_rmsnorm.rms_norm(x, normalized_shape, weight, eps), p, train)


class RMSNormDropout(nn.Module):
    """``nn.RMSNorm(normalized_shape, eps, elementwise_affine)`` followed by ``nn.Dropout(p)``, in one kernel:
    the same parameter, initialization and state_dict as nn.RMSNorm; model.eval() leaves the norm alone."""

    def __init__(
        self,
        normalized_shape,
        p: float = 0.5,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        _dropout.check_p(p)
        register()
        self.normalized_shape = as_shape(normalized_shape)
        self.p = float(p)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm_dropout(x, self.normalized_shape, self.weight, self.eps, self.p, self.training)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, p={self.p}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
