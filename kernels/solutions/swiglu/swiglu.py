"""course::swiglu's Python side (lesson 08's capstone: the answer). swiglu.cpp registers the ops' schemas and
their CPU and CUDA kernels; this file adds what torch.compile and autograd need:

    register(lib)     the fake kernels and the autograd formula, made with lib=... (a torch.library.Library
                      fragment of the namespace `course`): they last as long as `lib` does

Autocast needs no rule: silu and mul run in their inputs' dtype under autocast (neither is on its lists), so
the op does the same by falling through, and `swiglu(x)` in an autocast region matches the native
`F.silu(gate) * up` there.
"""

import torch


def _half_shape(x: torch.Tensor) -> tuple[int, ...]:
    return (*x.shape[:-1], x.shape[-1] // 2)


def _check_x(x: torch.Tensor) -> None:
    # The kernel's checks, for fake tensors: torch.compile then reports a bad shape as the kernel would.
    torch._check(x.dim() >= 1, lambda: "x must have at least one dimension, got a 0-d tensor")
    torch._check(
        x.shape[-1] % 2 == 0,
        lambda: f"x's last dimension holds gate and up, its two halves, so it must be even; got {list(x.shape)}",
    )


def swiglu_fake(x: torch.Tensor) -> torch.Tensor:
    """What course::swiglu returns: [..., h] from x [..., 2h], x's dtype and device, contiguous (the kernel
    allocates it with at::empty whatever x's strides)."""
    _check_x(x)
    return x.new_empty(_half_shape(x))


def swiglu_backward_fake(grad_y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """What course::swiglu_backward returns: grad_x, contiguous, of x's shape and dtype."""
    _check_x(x)
    torch._check(
        tuple(grad_y.shape) == _half_shape(x),
        lambda: f"grad_y must have shape {list(_half_shape(x))}, got {list(grad_y.shape)}",
    )
    return x.new_empty(x.shape)


def setup_context(ctx, inputs, output):
    (x,) = inputs
    ctx.save_for_backward(x)  # x only: backward recomputes silu(gate) from it instead of keeping a [..., h] tensor


def backward(ctx, grad_y):
    (x,) = ctx.saved_tensors
    return torch.ops.course.swiglu_backward(grad_y, x)


def swiglu(x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :h]) * x[..., h:] for x [..., 2h]: the op, differentiable once register() has run."""
    return torch.ops.course.swiglu(x)


def register(lib: torch.library.Library) -> None:
    torch.library.register_fake("course::swiglu", swiglu_fake, lib=lib)
    torch.library.register_fake("course::swiglu_backward", swiglu_backward_fake, lib=lib)
    torch.library.register_autograd("course::swiglu", backward, setup_context=setup_context, lib=lib)
