"""Exercise 2 of lesson 06: which files make an op's extension module in the wheel (setup.py's rule).

An op is built from every source file in its folder kernels/NAME/: NAME.cpp (the PyTorch glue: checks,
dtype dispatch, CPU code, registration), NAME.cu (its CUDA kernels and launchers) and every part of it,
NAME.PART.cpp and NAME.PART.cu (the torch-free files that compile the exercises, an architecture-specific
tuning, ...): the glue calls functions defined in the parts, so a module built without them links, then fails
on import with "undefined symbol". Headers (.h, .cuh) are compiled where a source includes them, never on
their own; a Python file in the folder (a Triton kernel) is not C++. A CPU-only wheel (USE_CUDA=0) compiles
no .cu file: there is no nvcc to compile it, and nothing would call it.

Part 1, extension_sources(kernels, name, cuda): the files of op `name` under the folder `kernels`, as Paths
(in any order). Careful with other ops whose name starts with this one's. About 2 lines.

Part 2, include_dirs(kernels): the folders the compiler searches for `#include "file.h"`. The exercise
headers (polynomial_forward.cuh, ...) are in two folders: kernels/exercises (your copies) and kernels/solutions
(the course's answers); a wheel ships the answers, never a learner's stub. Then kernels/ itself. 1 line.

Check your work with the self-check cell in lesson 06.
"""

from pathlib import Path


def extension_sources(kernels: Path, name: str, cuda: bool) -> list[Path]:
    # BEGIN SOLUTION
    suffixes = (".cpp", ".cu") if cuda else (".cpp",)
    return sorted(p for s in suffixes for p in (kernels / name).glob(f"*{s}"))  # the op's folder, no other
    # END SOLUTION


def include_dirs(kernels: Path) -> list[Path]:
    # BEGIN SOLUTION
    return [kernels / "solutions", kernels]
    # END SOLUTION
