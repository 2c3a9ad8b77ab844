"""The exercise of lesson 04b: make course::square differentiable, twice, with torch.library.register_autograd.

    torch.library.register_autograd(op, backward, setup_context=setup_context)
      setup_context(ctx, inputs, output)  runs after the op's forward: save what backward needs, tensors with
                                          ctx.save_for_backward(...) (autograd then notices if they change)
      backward(ctx, *grads)               one gradient per input of the op, in the schema's order; None
                                          for an input that needs none (ctx.needs_input_grad says which)

Call ops through torch.ops.course, never the pybind module: torch.compile traces the backward too.

Part 1, course::square(x) = x * x. Its derivative is 2 * x; the op course::square_backward, which lesson 04's
exercise 1 registered, computes 2 * x * grad_y with a C++ kernel. About 3 lines.

Part 2, course::square_backward(grad_y, x) = 2 * x * grad_y is an op too: for a second derivative
(gradgradcheck, a Hessian-vector product), autograd differentiates it. It has two inputs, so its backward
returns two gradients, each only when needed: with respect to grad_y, 2 * x * grad_grad_x, and with respect
to x, 2 * grad_y * grad_grad_x. Both are square_backward again. About 6 lines.

Check your work with the self-check cell in lesson 04b; it registers your functions with `register` below.
"""

import torch


def setup_square(ctx, inputs, output):
    (x,) = inputs
    # TODO(exercise): your code here (the solution is 1 lines).
    raise NotImplementedError("exercise: your code here")


def backward_square(ctx, grad_y):
    # TODO(exercise): your code here (the solution is 2 lines).
    raise NotImplementedError("exercise: your code here")


def setup_square_backward(ctx, inputs, output):
    grad_y, x = inputs
    # TODO(exercise): your code here (the solution is 1 lines).
    raise NotImplementedError("exercise: your code here")


def backward_square_backward(ctx, grad_grad_x):
    """grad_grad_x: the gradient of the loss with respect to square_backward's output. Returns the gradients
    with respect to (grad_y, x)."""
    # TODO(exercise): your code here (the solution is 5 lines).
    raise NotImplementedError("exercise: your code here")


def register(lib: torch.library.Library) -> None:
    """Your functions as the ops' autograd formulas. The registrations last as long as `lib` does."""
    torch.library.register_autograd("course::square", backward_square, setup_context=setup_square, lib=lib)
    torch.library.register_autograd(
        "course::square_backward", backward_square_backward, setup_context=setup_square_backward, lib=lib
    )
