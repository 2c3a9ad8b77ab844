"""The course's ops, built ahead of time (lesson 06: `pip wheel .` with setup.py). Importing this package loads
each op's prebuilt library, whose C++ side registers torch.ops.course.NAME (schema, CPU/CUDA/Autograd kernels),
then adds the Python registrations from course_ops.ops.NAME (helpers/ops/NAME.py in the course folder: fake
kernels, autocast rules). Nothing is compiled:
no nvcc, no ninja, no kernels/ folder needed.

    import course_ops                        # torch.ops.course.polynomial(x, coeffs) works from here on
    course_ops.OPS                           # the ops this wheel was built with, e.g. ["polynomial"]
    course_ops.extensions["polynomial"]      # the op's module (its pybind functions: forward, backward, ...)

helpers.ops.extension(NAME) (and course_ops.ops.extension) returns these modules once this package is imported,
instead of building kernels/.

A wheel built from a learner's setup.py entry (lesson 06's exercise: your own op, `square`) carries its Python
side as course_ops.registrations: lesson 04's fake kernels and autograd formulas, each module with a
register(lib); importing course_ops registers them too, with a Library fragment that lives as long as the process.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import pkgutil
from pathlib import Path

import torch  # noqa: F401  (the libraries link against torch's: load it first)

_HERE = Path(__file__).resolve().parent


def _built() -> list[str]:
    """The extension modules in this folder (course_ops/NAME.cpython-312-x86_64-linux-gnu.so, ...)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return sorted({p.name.split(".")[0] for p in _HERE.iterdir() if p.name.endswith(suffixes)})


OPS: list[str] = _built()
if not OPS:
    raise ImportError(
        f"course_ops at {_HERE} holds no built op: install the wheel (`pip wheel --no-build-isolation .` in the "
        "course folder), or put the course folder on sys.path and use helpers.ops, which builds kernels/ itself"
    )
extensions = {name: importlib.import_module(f"{__name__}.{name}") for name in OPS}

from . import ops as _ops  # noqa: E402  (helpers/ops, shipped as course_ops.ops; after `extensions`: extension() looks here)

for _name in OPS:
    # An op with no module in course_ops.ops (a learner's op) brings its registrations in course_ops.registrations.
    if importlib.util.find_spec(f"{_ops.__name__}.{_name}") is not None:
        importlib.import_module(f"{_ops.__name__}.{_name}").register()

_LIBRARY = None  # the fragment that holds course_ops.registrations' registrations (they end with it)
if (_HERE / "registrations").is_dir():
    _LIBRARY = torch.library.Library("course", "FRAGMENT")
    for _info in pkgutil.iter_modules([str(_HERE / "registrations")]):
        importlib.import_module(f"{__name__}.registrations.{_info.name}").register(_LIBRARY)
