"""course::swiglu's setup.py entry (lesson 08's capstone: the answer): the extension module that the course's
setup.py builds for it, as in lesson 06's exercise (`COURSE_ENTRY=this file COURSE_HEADERS=this folder`).

    extension(kernels, headers, cuda, flags) -> CppExtension (cuda False) or CUDAExtension (cuda True)

`headers` is this folder; `kernels` the course's kernels/ (for common/checks.h and common/library.h).
PYTHON_SIDE ships swiglu.py beside it as course_ops.registrations.swiglu: importing course_ops registers it.
"""

from pathlib import Path

PYTHON_SIDE = ["swiglu.py"]


def extension(kernels: Path, headers: Path, cuda: bool, flags: dict):
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    patterns = ["*.cpp", "*.cu"] if cuda else ["*.cpp"]
    sources = sorted(str(p) for pattern in patterns for p in Path(headers).glob(pattern))
    kind = CUDAExtension if cuda else CppExtension
    return kind(
        name="course_ops.swiglu",
        sources=sources,
        include_dirs=[str(headers), str(kernels)],
        define_macros=[("WITH_CUDA", None)] if cuda else [],
        extra_compile_args=flags,
    )
