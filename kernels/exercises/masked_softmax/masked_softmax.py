"""course::masked_softmax's Python side (lesson 09, the practice set: the answer). masked_softmax.cpp registers the
ops' schemas and their CPU and CUDA kernels; this file adds what torch.compile and autograd need:

    register(lib)     the fake kernels and the autograd formula, made with lib=... (a torch.library.Library
                      fragment of the namespace `course`): they last as long as `lib` does
    masked_softmax(x, key_padding_mask=None, scale=1.0, causal=False)
                      the op as a model calls it, differentiable once register() has run

No autocast rule: the op computes in float32 (float64 for float64) whatever its input's dtype and returns that
dtype, as scaled_dot_product_attention does; under CUDA autocast the native torch.softmax returns float32 instead.
"""

import torch


def _check(x: torch.Tensor, key_padding_mask: torch.Tensor | None, causal: bool) -> None:
    # The kernel's checks, for fake tensors: torch.compile then reports a bad shape as the kernel would.
    torch._check(x.dim() >= 1, lambda: "x must have at least one dimension, got a 0-d tensor")
    torch._check(not causal or x.dim() >= 2, lambda: f"causal=True needs x of shape [..., Lq, Lk]; got {list(x.shape)}")
    if key_padding_mask is not None:
        torch._check(
            x.dim() >= 2, lambda: f"key_padding_mask [B, Lk] needs x of shape [B, ..., Lk]; got {list(x.shape)}"
        )
        torch._check(
            key_padding_mask.dtype == torch.bool,
            lambda: f"key_padding_mask must be a bool tensor (True = keep the key), got {key_padding_mask.dtype}",
        )
        want = (x.shape[0], x.shape[-1])
        torch._check(
            tuple(key_padding_mask.shape) == want,
            lambda: f"key_padding_mask must have shape {list(want)}, got {list(key_padding_mask.shape)}",
        )


def masked_softmax_fake(x, key_padding_mask, scale, causal):
    """What course::masked_softmax returns: a new contiguous tensor of x's shape, dtype and device (the kernel
    allocates it with at::empty whatever x's strides)."""
    _check(x, key_padding_mask, causal)
    # TODO(exercise): your code here (the solution is 1 lines).
    raise NotImplementedError("exercise: your code here")


def masked_softmax_backward_fake(grad_y, y, scale):
    """What course::masked_softmax_backward returns: grad_x, contiguous, of y's shape and dtype."""
    torch._check(
        tuple(grad_y.shape) == tuple(y.shape),
        lambda: f"grad_y must have shape {list(y.shape)}, got {list(grad_y.shape)}",
    )
    # TODO(exercise): your code here (the solution is 1 lines).
    raise NotImplementedError("exercise: your code here")


def setup_context(ctx, inputs, output):
    x, key_padding_mask, scale, causal = inputs
    # TODO(exercise): your code here (the solution is 2 lines).
    raise NotImplementedError("exercise: your code here")


def backward(ctx, grad_y):
    # TODO(exercise): your code here (the solution is 3 lines).
    raise NotImplementedError("exercise: your code here")


def masked_softmax(
    x: torch.Tensor, key_padding_mask: torch.Tensor | None = None, scale: float = 1.0, causal: bool = False
) -> torch.Tensor:
    """softmax(scale * x + mask) over x's last dimension (x [..., Lq, Lk]): causal masks key j > query i (as
    scaled_dot_product_attention's is_causal), key_padding_mask [B, Lk] (True = keep) masks keys per batch; masked
    keys get 0, and a row with no key kept is all zeros."""
    return torch.ops.course.masked_softmax(x, key_padding_mask, float(scale), bool(causal))


def register(lib: torch.library.Library) -> None:
    torch.library.register_fake("course::masked_softmax", masked_softmax_fake, lib=lib)
    torch.library.register_fake("course::masked_softmax_backward", masked_softmax_backward_fake, lib=lib)
    torch.library.register_autograd("course::masked_softmax", backward, setup_context=setup_context, lib=lib)
