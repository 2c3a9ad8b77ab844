"""course::square as a finished op, for lesson 04's exercise 3 (kernels/exercises/test_square_op.py, a test file
that pytest runs), and the broken versions of it (mutants) that exercise 3's self-check runs those tests against.

    square = square_op.load()     # torch.ops.course.square: exercise 1's registration (its CPU and CUDA
                                  # kernels) with the course's fake kernels and autograd (the answers of
                                  # exercise 2 and of lesson 04b's exercise)

    python -m helpers.exercises.square_op FILE    # what the self-check runs in a child process: pytest on FILE
                                                  # with the real op, then once per mutant (MUTANTS)

One process runs every pytest session (pytest.main, once per mode): importing torch and loading the op is most
of a run's time, so a process per mutant would cost that many times over. A mutant replaces one registration
in a torch.library.Library that the next mode destroys, so each session sees exactly one thing broken.
"""

from __future__ import annotations

import sys

MUTANTS = {
    "float16": "course::square computes float16 inputs wrongly (x * |x|: negative where x is); other dtypes are right",
    "non_contiguous": "course::square reads x's memory as if x were contiguous: wrong values for a transposed or "
    "sliced x, right ones for a contiguous x",
    "fake_shape": "course::square's fake kernel returns a flat tensor of x.numel() elements, where the kernel "
    "returns x's shape (the same for a 1-d x)",
    "no_autograd": "course::square has no autograd registration: its output does not require grad, and backward "
    "has no formula",
    "wrong_gradient": "course::square's backward returns x * grad_y, forgetting the 2",
}

_mode: str | None = None  # what this process's course::square is now (None: not set up yet)


def _exact(x):
    """What the C++ kernel returns: x * x rounded once to x's dtype (a product of two float16/bfloat16/float32
    values is exact in float64), as a new contiguous tensor."""
    import torch

    with torch.no_grad():
        return (x.double() * x.double()).to(x.dtype).contiguous()


def _wrong_for_float16(x):
    import torch

    if x.dtype != torch.float16:
        return _exact(x)
    with torch.no_grad():
        return (x.double() * x.double().abs()).to(x.dtype).contiguous()


def _reads_as_contiguous(x):
    import torch

    strides, step = [], 1
    for n in reversed(x.shape):
        strides.insert(0, step)
        step *= max(n, 1)
    return _exact(torch.as_strided(x, x.shape, strides, x.storage_offset()))


def set_up(mode: str = "real") -> None:
    """Make course::square the real op (mode "real") or one of MUTANTS, in this process."""
    global _mode
    import torch

    from .. import library, loader
    from . import python_module

    loader.load("square")  # exercise 1's registration (COURSE_SOLUTIONS says whose)
    if not hasattr(torch.ops.course, "square"):
        raise RuntimeError(
            "course::square is not registered: lesson 04's exercise 1 (kernels/exercises/square_library.h) "
            "registers it; its self-check says what is missing"
        )
    fakes = python_module("square_fake", solution=True)
    fake_lib = library.fresh("square_op fake kernels")
    if mode == "fake_shape":
        torch.library.register_fake("course::square", lambda x: x.new_empty(x.numel()), lib=fake_lib)
        torch.library.register_fake("course::square_backward", fakes.square_backward_fake, lib=fake_lib)
    else:
        fakes.register(fake_lib)
    autograd_lib = library.fresh("square_op autograd")
    if mode != "no_autograd":
        formulas = python_module("square_autograd", solution=True)
        backward = formulas.backward_square
        if mode == "wrong_gradient":

            def backward(ctx, grad_y):
                (x,) = ctx.saved_tensors
                return torch.ops.course.square_backward(grad_y, x) / 2

        torch.library.register_autograd(
            "course::square", backward, setup_context=formulas.setup_square, lib=autograd_lib
        )
        torch.library.register_autograd(
            "course::square_backward",
            formulas.backward_square_backward,
            setup_context=formulas.setup_square_backward,
            lib=autograd_lib,
        )
    kernel_lib = library.fresh("square_op kernels")
    kernel = {"float16": _wrong_for_float16, "non_contiguous": _reads_as_contiguous}.get(mode)
    if kernel is not None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": that is the point
            for key in ("CPU", "CUDA"):
                kernel_lib.impl("square", kernel, key)
    library._forget_dispatch_caches()
    torch._dynamo.reset()
    _mode = mode


def load():
    """torch.ops.course.square with its fake kernels and autograd: the real op, unless the self-check has set
    up a mutant in this process."""
    import torch

    if _mode is None:
        set_up("real")
    return torch.ops.course.square


def main(argv: list[str]) -> int:
    """pytest on argv[0] with the real op, then (if that passes) once per mutant, stopping at a mutant's first
    failing test. Each session's output follows a line `=== MODE name`, and its exit code a line `=== RC name N`."""
    import pytest

    path = argv[0]
    for mode in ["real", *MUTANTS]:
        print(f"=== MODE {mode}", flush=True)
        set_up(mode)
        args = [path, "-q", "-p", "no:cacheprovider", "-W", "ignore::UserWarning"]
        args += ["-rfE"] if mode == "real" else ["-x", "--tb=no", "-rf", "--color=no"]
        rc = int(pytest.main(args))
        print(f"=== RC {mode} {rc}", flush=True)
        if mode == "real" and rc != 0:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
