"""The course's finished ops, one module per lesson (helpers/ops/<kernel name>.py), for later lessons,
tests and benchmarks: each has a plain-PyTorch `reference` and the op the lesson builds. The wheel
(setup.py) ships this package as course_ops.ops, so nothing here imports the rest of helpers at import time.

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

NAMESPACE = "course"


@functools.cache
def extension(name: str):
    """Build/load kernels/NAME once per process (solutions or your files, as COURSE_SOLUTIONS says).
    Loading it defines its ops in torch.ops.course (the C++ side registers them as the library loads).
    Once the installed package course_ops is imported (lesson 06), its prebuilt module is used instead."""
    prebuilt = getattr(sys.modules.get("course_ops"), "extensions", {})
    if name in prebuilt:
        return prebuilt[name]
    from .. import loader  # the course folder's builder (in the wheel this package is course_ops.ops: no loader)

    return loader.load(name)


# What `version=` means for every op's Python function (polynomial, layer_norm, rms_norm, ...): None, the
# default, is the registered op torch.ops.course.NAME; N runs the lesson's ladder, forward vN and backward vN
# (the ladder's last backward where it has no vN), through the lesson's Python autograd.Function over the
# op's pybind11 module (ext.forward/ext.backward with a version: the lessons' ladders).


def backward_version(version: int, last: int) -> int:
    """The backward rung that `version` runs: vN, or the ladder's last backward where it has no vN."""
    return min(version, last)


# Eager calls go through the op module's pybind11 binding of the same registered op (the module's function of
# the op's name, which calls the dispatcher from C++) instead of torch.ops.course.NAME, whose boxed call converts
# every argument to an IValue and matches it against the schema: benchmarks.eager_call measures the binding
# 1.9-5.0 us (10-19 %) faster per forward and 4.7-19 us per forward+backward for every op here (64x1024 bf16,
# CPU time per call on an H200 host). torch.compile always sees torch.ops (Dynamo cannot look into pybind).
EAGER_BINDING: dict[str, str] = {  # op -> the kernels/ module that binds it
    "polynomial": "polynomial",
    "fused_bias_relu": "fused_bias_relu",
    "layer_norm": "layernorm",
    "rms_norm": "rmsnorm",
    "add_rms_norm": "add_norm",
    "add_layer_norm": "add_norm",
    "rms_norm_dropout": "norm_dropout",
}


def call(op: str, *args, ext=None):
    """torch.ops.course.OP(*args), every op's one public surface; in eager mode through the binding where
    EAGER_BINDING says so, or through `ext` (a module from loader.load: its own build of the op)."""
    if ext is None and (op not in EAGER_BINDING or torch.compiler.is_compiling()):
        return getattr(torch.ops.course, op)(*args)
    return getattr(ext or extension(EAGER_BINDING[op]), op)(*args)


def op_modules() -> list[str]:
    """The modules of this package that are ops (they have a register()): polynomial, layernorm, ...; not the
    helpers they share (shapes)."""
    import importlib
    import pkgutil

    names = sorted(m.name for m in pkgutil.iter_modules(__path__))
    return [n for n in names if hasattr(importlib.import_module(f"{__name__}.{n}"), "register")]


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
