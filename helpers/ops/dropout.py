"""Lesson 05's dropout with a counter-based generator: the mask is never stored, backward recomputes it from
the (seed, offset) forward drew (kernels/common/philox.cuh, kernels/dropout/dropout.cu, kernels/dropout/dropout.cpp).

    y = dropout(x, 0.1)                       # torch.ops.course.dropout: differentiable, torch.compile-able,
                                              # reproducible under torch.manual_seed, CUDA-graph safe
    y = dropout(x, 0.1, train=False)          # eval mode: x itself, as F.dropout(x, 0.1, training=False)
    y = dropout(x, 0.1, generator=g)          # the mask from your torch.Generator (on x's device)
    layer = Dropout(0.1)                      # nn.Dropout's interface; model.eval() turns it off
    y, rng_state = torch.ops.course.dropout(x, 0.1, True)   # the op itself, and the (seed, offset) it used
    grad_x = torch.ops.course.dropout_backward(grad_y, rng_state, 0.1)

Kept elements are scaled by 1 / (1 - p), dropped ones are 0 (whatever their value: native dropout multiplies
by 0, so there a dropped inf or NaN gives NaN). p = 0 returns a copy of x, p = 1 zeros, both exactly and
without drawing from the generator, as native dropout does. Under torch.autocast the op, like native
dropout, has no autocast rule: it runs in its input's dtype.
"""

from __future__ import annotations

import torch
from torch import nn

from . import extension, once

FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_C10_NAMES = {torch.int32: "Int", torch.int64: "Long", torch.bool: "Bool", torch.uint8: "Byte"}


def check_p(p) -> None:
    """The kernels' check of p, in their words (ValueError; NaN fails it too). A plain `raise`, so that
    torch.compile decides it while tracing (p is a number there)."""
    if not (p >= 0 and p <= 1):
        raise ValueError(f"p (the probability of zeroing an element) must be between 0 and 1, got {float(p):g}")


@once
def register() -> None:
    """Load the op (kernels/dropout/dropout.cpp defines the two ops below, with CPU, CUDA and Autograd kernels) and
    register their fake kernels, what torch.compile traces with instead of ours.

    course::dropout(x, p, train, generator=None) -> (y, rng_state)     rng_state: int64 [2], (seed, offset)
    course::dropout_backward(grad_y, rng_state, p) -> grad_x
    """
    extension("dropout")
    _never_merged(torch.ops.course.dropout)

    def check_floating(t, name):
        torch._check_type(
            t.dtype in FLOATING,
            lambda: f"{name} must be float32, float64, float16 or bfloat16, got {_C10_NAMES.get(t.dtype, t.dtype)}",
        )

    @torch.library.register_fake("course::dropout")
    def _(x, p, train, generator=None):
        check_floating(x, "x")
        check_p(p)
        return x.new_empty(x.shape), x.new_empty((2,), dtype=torch.int64)  # contiguous, like the kernel's

    @torch.library.register_fake("course::dropout_backward")
    def _(grad_y, rng_state, p):
        check_floating(grad_y, "grad_y")
        check_p(p)
        torch._check_value(
            rng_state.shape == (2,), lambda: f"rng_state must have shape [2], got {list(rng_state.shape)}"
        )
        return grad_y.new_empty(grad_y.shape)


def _never_merged(op) -> None:
    """Keep torch.compile from merging two identical calls of a random op into one. AOTAutograd's partitioner
    merges common subexpressions of a training graph except the ops in its list of random ops
    (torch._functorch.compile_utils.rand_ops: aten's only; in torch 2.11 it does not look at the
    nondeterministic_seeded tag that course::dropout carries), so dropout(h) twice in one compiled step would
    share a mask. tests/ops/test_dropout.py's compile test fails without this."""
    from torch._functorch import compile_utils

    rand_ops = getattr(compile_utils, "rand_ops", None)
    if isinstance(rand_ops, list) and op not in rand_ops:
        rand_ops.append(op)


def dropout(x: torch.Tensor, p: float = 0.5, train: bool = True, *, generator: torch.Generator | None = None):
    """Zero each element of x with probability p and scale the others by 1 / (1 - p), differentiable in x.
    train=False returns x itself (like F.dropout(x, p, training=False)); p is checked either way."""
    check_p(p)
    if not train:
        return x
    register()
    return torch.ops.course.dropout(x, float(p), True, generator)[0]


def reference(x: torch.Tensor, p: float = 0.5, train: bool = True) -> torch.Tensor:
    """Native PyTorch's dropout (its own generator stream and mask layout: the same statistics, other bits)."""
    return torch.nn.functional.dropout(x, p, train)


def expected(x: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    """What dropout gives for a known mask `keep` (bool, x's shape): x / (1 - p) in x's math type where kept,
    0 elsewhere, rounded once to x's dtype."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    scale = torch.tensor(1.0, dtype=acc) / (1 - torch.tensor(p, dtype=acc))
    return torch.where(keep, x.to(acc) * scale.to(x.device), torch.zeros((), dtype=acc, device=x.device)).to(x.dtype)


class Dropout(nn.Module):
    """nn.Dropout(p) with the course's op: the mask recomputed in backward instead of kept between the passes
    (16 bytes of generator state per call instead of one byte per element). model.eval() makes it the identity."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        check_p(p)
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
