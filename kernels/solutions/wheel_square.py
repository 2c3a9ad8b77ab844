"""Exercise 1 of lesson 06: your own op, `square`, in the wheel. Write its setup.py entry: the extension module
that setup.py builds for it (COURSE_ENTRY=this file), as setup.py's extension_for does for the course's ops.

    extension(kernels, headers, cuda, flags) -> a torch.utils.cpp_extension.CppExtension (cuda False) or
                                                CUDAExtension (cuda True)

    kernels   the course's kernels/ folder (a Path)
    headers   the folder of exercise files the op is built with: your kernels/exercises/ (the self-check passes
              kernels/solutions/ when you ask it for the course's answers)
    cuda      whether this wheel compiles device code (nvcc) and launches it from the glue
    flags     the course's compiler flags, ready as extra_compile_args

What the entry must say:
  * the module's full name: `import course_ops` loads every extension module inside the package course_ops
    (the folder course_ops/ of the wheel), and nothing at the top level;
  * its sources: every translation unit in the op's folder, kernels/square/, whatever files it holds today
    (the glue, the kernels, the parts that compile your exercise files); device code only in a CUDA wheel,
    where nvcc is there to compile it;
  * where `#include "..."` finds what those sources include: your exercise files, and the course's own headers
    (common/checks.h, ...), which the sources name relative to kernels/;
  * in a CUDA wheel, the macro the glue tests before it launches a kernel (kernels/square/ and your glue use it);
  * the flags.

About 10 lines. PYTHON_SIDE (given) is the op's Python side that setup.py ships beside it as course_ops.registrations:
lesson 04's fake kernels (which make it traceable, compilable and exportable) and autograd formulas.

Check your work with the self-check cell in lesson 06: it builds the wheel with your entry, installs it into an
empty folder and uses the op from a new Python process that sees only that folder.
"""

from pathlib import Path

PYTHON_SIDE = ["square_fake.py", "square_autograd.py"]


def extension(kernels: Path, headers: Path, cuda: bool, flags: dict):
    from torch.utils.cpp_extension import CppExtension, CUDAExtension  # noqa: F401  (the stub uses neither yet)

    # BEGIN SOLUTION
    patterns = ["*.cpp", "*.cu"] if cuda else ["*.cpp"]
    sources = sorted(str(p) for pattern in patterns for p in (kernels / "square").glob(pattern))
    kind = CUDAExtension if cuda else CppExtension
    return kind(
        name="course_ops.square",
        sources=sources,
        include_dirs=[str(headers), str(kernels)],
        define_macros=[("WITH_CUDA", None)] if cuda else [],
        extra_compile_args=flags,
    )
    # END SOLUTION
