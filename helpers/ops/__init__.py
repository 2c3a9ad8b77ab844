"""The course's finished ops, one module per lesson (helpers/ops/<kernel name>.py), for later lessons,
tests and benchmarks: each has a plain-PyTorch `reference` and the op the lesson builds.

From lesson 04 on they are real PyTorch ops, registered with torch.library in the namespace `course`:
the schema and the CPU, CUDA and Autograd kernels in C++ (kernels/NAME/NAME.cpp, see kernels/common/library.h), and
here what only Python can add: the fake kernels torch.compile traces with, and autocast rules.

    from helpers.ops import polynomial       # importing registers nothing and builds nothing;
    polynomial.polynomial(x, coeffs)         # the first call builds/loads the op and registers it,
    torch.ops.course.polynomial(x, coeffs)   # after which torch.ops has it too
"""

from __future__ import annotations

import functools
import numbers
import sys

import torch

from .. import loader

NAMESPACE = "course"


@functools.cache
def extension(name: str):
    """Build/load kernels/NAME once per process (solutions or your files, as COURSE_SOLUTIONS says).
    Loading it defines its ops in torch.ops.course (the C++ side registers them as the library loads).
    Once the installed package course_ops is imported (lesson 06), its prebuilt module is used instead."""
    prebuilt = getattr(sys.modules.get("course_ops"), "extensions", {})
    return prebuilt[name] if name in prebuilt else loader.load(name)


def as_shape(normalized_shape) -> tuple[int, ...]:
    """A norm's normalized_shape as native takes it (an int, or a sequence of ints) as a tuple."""
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


def once(register):
    """Decorator: `register()` (load an op's extension, then add its Python registrations) runs once per
    process, however often it is called, so re-running a cell or re-importing never registers twice
    (a second register_fake for the same op raises). Where the first call of a process comes from a function
    torch.compile traces, Dynamo runs it instead of tracing into it (`assume_constant_result`): loading an
    extension is not traceable (it reads file times and may run a compiler), and with fullgraph=True the
    attempt failed the compile ("Attempted to call function marked as skipped")."""
    done = []

    @functools.wraps(register)
    def wrapper() -> None:
        if not done:
            register()
            done.append(True)

    return torch.compiler.assume_constant_result(wrapper)
