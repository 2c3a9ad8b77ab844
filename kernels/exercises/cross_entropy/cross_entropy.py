"""course::cross_entropy's Python side (lesson 09's practice op: the answer). cross_entropy.cpp registers the
ops' schemas and their CPU and CUDA kernels; this file adds what torch.compile and autograd need, and the
function a model calls:

    register(lib)     the fake kernels of the four ops and the autograd formula of course::cross_entropy, made
                      with lib=... (a torch.library.Library fragment of the namespace `course`)
    cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean", inplace_grad=False)
                      F.cross_entropy's loss for logits [N, V] and int64 target [N], differentiable

Two ways to differentiate:
* inplace_grad=False (the default): course::cross_entropy saves logits, target and the rows' lse (N floats);
  backward runs course::cross_entropy_backward, which writes a new [N, V] gradient. Peak memory: the logits
  and one gradient, where native keeps a [N, V] log-softmax from forward and makes two [N, V] tensors in
  backward.
* inplace_grad=True (what Liger-Kernel does): forward runs course::cross_entropy_inplace_, which computes the
  loss and writes d loss / d logits over the logits in the same pass. THE LOGITS ARE DESTROYED: after the call
  they hold the gradient, which backward only scales by the incoming gradient (course::cross_entropy_scale_, a
  no-op for the usual 1). No [N, V] tensor is allocated at all. Only when a gradient is needed (logits require
  grad and grad mode is on); otherwise the logits are left alone. An op before that saved the logits for its
  own backward then fails loudly in backward ("modified by an inplace operation"), since the op bumps their
  version counter. Eager only: under torch.compile use the default.

The loss has the logits' dtype, as F.cross_entropy's (computed in float, rounded once). No autocast rule: under
autocast F.cross_entropy casts 16-bit logits to float32 first (a copy of the logits); this op reads them as
they are and computes in float anyway, so the loss keeps the logits' dtype there.
"""

import torch

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check(logits: torch.Tensor, target: torch.Tensor) -> None:
    # The kernels' shape checks, for fake tensors: torch.compile then reports a bad shape as the kernel would.
    torch._check(logits.dim() == 2, lambda: f"logits must be [N, V], got shape {list(logits.shape)}")
    torch._check(
        target.dim() == 1 and target.shape[0] == logits.shape[0],
        lambda: f"target must have shape [{logits.shape[0]}], got {list(target.shape)}",
    )


def _loss_shape(logits: torch.Tensor, reduction: int) -> tuple:
    return (logits.shape[0],) if reduction == REDUCTIONS["none"] else ()


def cross_entropy_fake(logits, target, ignore_index, label_smoothing, reduction):
    """What course::cross_entropy returns: the loss ([N], or a scalar) in the logits' dtype, and lse [N] in the
    math's dtype (float32, float64 for float64 logits)."""
    _check(logits, target)
    lse = logits.new_empty((logits.shape[0],), dtype=_acc_dtype(logits.dtype))
    return logits.new_empty(_loss_shape(logits, reduction)), lse


def cross_entropy_backward_fake(grad_loss, logits, target, lse, ignore_index, label_smoothing, reduction):
    """What course::cross_entropy_backward returns: the gradient, [N, V] contiguous, in the logits' dtype."""
    _check(logits, target)
    return logits.new_empty(logits.shape)


def cross_entropy_inplace_fake(logits, target, ignore_index, label_smoothing, reduction):
    """course::cross_entropy_inplace_ returns the loss (a new tensor); its write over logits has no output."""
    _check(logits, target)
    return logits.new_empty(_loss_shape(logits, reduction))


def cross_entropy_scale_fake(grad, grad_loss):
    """course::cross_entropy_scale_ writes grad in place and returns nothing."""
    return None


def setup_context(ctx, inputs, output):
    logits, target, ignore_index, label_smoothing, reduction = inputs
    loss, lse = output
    # TODO(exercise): your code here (the solution is 3 lines).
    raise NotImplementedError("exercise: your code here")


def backward(ctx, grad_loss, grad_lse):
    # TODO(exercise): your code here (the solution is 3 lines).
    raise NotImplementedError("exercise: your code here")


class CrossEntropyInplace(torch.autograd.Function):
    """The loss, with d loss / d logits written over the logits in forward (course::cross_entropy_inplace_):
    backward scales that gradient by the incoming one, in place, and hands it on."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, label_smoothing, reduction):
        loss = torch.ops.course.cross_entropy_inplace_(logits, target, ignore_index, label_smoothing, reduction)
        ctx.save_for_backward(logits)  # now the gradient (its version, bumped by the op, is the one saved)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        # TODO(exercise): your code here (the solution is 3 lines).
        raise NotImplementedError("exercise: your code here")


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    inplace_grad: bool = False,
) -> torch.Tensor:
    """F.cross_entropy(logits, target, ignore_index=..., label_smoothing=..., reduction=...) for logits [N, V] and
    int64 target [N], fused. inplace_grad=True overwrites logits with the gradient when one is needed (see the
    module's docstring): use it where nothing else needs the logits afterwards."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    args = (int(ignore_index), float(label_smoothing), REDUCTIONS[reduction])
    if inplace_grad and logits.requires_grad and torch.is_grad_enabled():
        return CrossEntropyInplace.apply(logits, target, *args)
    return torch.ops.course.cross_entropy(logits, target, *args)[0]


def register(lib: torch.library.Library) -> None:
    torch.library.register_fake("course::cross_entropy", cross_entropy_fake, lib=lib)
    torch.library.register_fake("course::cross_entropy_backward", cross_entropy_backward_fake, lib=lib)
    torch.library.register_fake("course::cross_entropy_inplace_", cross_entropy_inplace_fake, lib=lib)
    torch.library.register_fake("course::cross_entropy_scale_", cross_entropy_scale_fake, lib=lib)
    torch.library.register_autograd("course::cross_entropy", backward, setup_context=setup_context, lib=lib)
