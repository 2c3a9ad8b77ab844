"""Exercise 2 of lesson 01: make the course's polynomial kernels differentiable with a torch.autograd.Function,
and test its gradients with torch.autograd.gradcheck.

The kernels are the module the lesson loads, ext = loader.load("polynomial"):

    ext.forward(x, coeffs) -> y          y = a*x^3 + b*x^2 + c*x + d, coeffs = [a, b, c, d]
    ext.backward(grad_y, x, coeffs, need_coeffs_grad) -> [grad_x, grad_coeffs]
        grad_x       grad_y * dy/dx, element by element (what dy/dx needs, backward reads from x and coeffs)
        grad_coeffs  the gradient of coeffs: four sums over every element (a reduction, extra work), in the
                     dtype the kernel computes in (autograd converts it to coeffs' dtype); None when
                     need_coeffs_grad is False

Part 1, `Polynomial` (about 7 lines). forward(ctx, x, coeffs, ext) returns y from the kernel and keeps what
backward will need: tensors with ctx.save_for_backward (autograd stores them, and refuses to run backward if one
was changed in place meanwhile), anything else as an attribute of ctx. backward(ctx, grad_y) returns one
gradient per input of forward, in order, None where an input has none or needs none: ctx.needs_input_grad
says, per input, whether anyone asked.

Part 2, `gradcheck_polynomial` (about 3 lines): torch.autograd.gradcheck compares the backward of `apply` with
finite differences of its forward, for every input that requires grad.

Call the kernels through the `ext` you are given (the self-check counts the calls). Check your work with the
self-check cell in lesson 01.
"""

import torch


class Polynomial(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, coeffs, ext):
        # TODO(exercise): your code here (the solution is 3 lines).
        raise NotImplementedError("exercise: your code here")

    @staticmethod
    def backward(ctx, grad_y):
        # TODO(exercise): your code here (the solution is 4 lines).
        raise NotImplementedError("exercise: your code here")


def gradcheck_polynomial(apply, ext, device) -> bool:
    """torch.autograd.gradcheck on apply(x, coeffs, ext) (apply is Polynomial.apply, or another Function's),
    with a small random x and random coefficients on `device`, so that it tests the gradients of both. Returns
    gradcheck's verdict: True, or it raises where a gradient is wrong."""
    # TODO(exercise): your code here (the solution is 3 lines).
    raise NotImplementedError("exercise: your code here")
