"""Exercise 2 of lesson 04: the fake kernels of course::square and course::square_backward.

Exercise 1 (square_library.h) registered both ops in C++ (their schemas, and CPU and CUDA kernels) and nothing
else, so torch.compile cannot trace them yet: to learn what an op returns without running it, the compiler
calls the op's *fake kernel* on fake tensors (shape, dtype, strides and device; no data). Write the two fake
kernels: each returns a new tensor that looks exactly like what the C++ kernel returns (read forward() and
backward() in kernels/square/square.cpp: what do they allocate, and what do they refuse?), and computes
nothing. About 1 line for square, 2 for square_backward.

Check your work with the self-check cell in lesson 04; it registers your functions with `register` below
(re-running the cell replaces the earlier registration).
"""

import torch


def square_fake(x: torch.Tensor) -> torch.Tensor:
    """What torch.ops.course.square(x) returns (y = x * x), as a new tensor with no values written."""
    # TODO(exercise): your code here (the solution is 1 lines).
    raise NotImplementedError("exercise: your code here")


def square_backward_fake(grad_y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """What torch.ops.course.square_backward(grad_y, x) returns (grad_x = 2 * x * grad_y)."""
    # TODO(exercise): your code here (the solution is 2 lines).
    raise NotImplementedError("exercise: your code here")


def register(lib: torch.library.Library) -> None:
    """Your functions as the ops' fake kernels. The registrations last as long as `lib` does."""
    torch.library.register_fake("course::square", square_fake, lib=lib)
    torch.library.register_fake("course::square_backward", square_backward_fake, lib=lib)
