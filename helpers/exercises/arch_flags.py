"""Self-check for lesson 06's first exercise: kernels/exercises/arch_flags.py, TORCH_CUDA_ARCH_LIST as nvcc's
-gencode flags. Compared with what torch's BuildExtension makes of the same list
(torch.utils.cpp_extension._get_cuda_arch_flags), as a set, on lists drawn afresh each run: one to four
architectures, some with +PTX, separated by ";" or by spaces. Nothing is compiled."""

from __future__ import annotations

import os
import random

from .. import selfcheck
from . import Wrong, python_module

OP = "polynomial"  # the op lesson 06 builds for 1 and 3 architectures
NAME = "arch_flags"
FILE = "kernels/exercises/arch_flags.py"
HINT = (
    'each "X.Y" gives -gencode=arch=compute_XY,code=sm_XY; "X.Y+PTX" gives that and also '
    "-gencode=arch=compute_XY,code=compute_XY; split the list on ';' and on spaces. See " + FILE
)
ARCHS = ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]
FIXED = ["7.5", "9.0+PTX", "7.5;8.0;9.0", "7.5 8.0 9.0+PTX", "8.6+PTX;12.0+PTX"]


def reference(arch_list: str) -> list[str]:
    """What torch's BuildExtension passes to nvcc for this TORCH_CUDA_ARCH_LIST."""
    from torch.utils.cpp_extension import _get_cuda_arch_flags

    was = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list
    try:
        return _get_cuda_arch_flags()
    finally:
        if was is None:
            del os.environ["TORCH_CUDA_ARCH_LIST"]
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = was


def _random_list(rng: random.Random) -> str:
    archs = [a + "+PTX" * (rng.random() < 0.4) for a in sorted(rng.sample(ARCHS, rng.randint(1, 4)), key=float)]
    return rng.choice([";", " "]).join(archs)


def check(device=None, ext=None, seed=None) -> int:
    """Your gencode_flags (kernels/exercises/arch_flags.py, or `ext`, a module with it) against torch's, on fixed
    and random lists. `device` is not used: nothing runs on it."""
    seed = selfcheck.new_seed(seed)
    mod = ext or python_module(NAME)
    rng = random.Random(seed)
    cases = 0
    with selfcheck.exercise(NAME):
        for arch_list in FIXED + [_random_list(rng) for _ in range(12)]:
            where = f"TORCH_CUDA_ARCH_LIST={arch_list!r}"
            try:
                got = mod.gencode_flags(arch_list)
            except NotImplementedError:
                selfcheck.fail(NAME, where, f"gencode_flags in {FILE} is not written yet", hint=HINT, seed=seed)
            except Exception as e:
                selfcheck.fail(NAME, where, f"raised {type(e).__name__}: {e}", hint=HINT, seed=seed)
            want = reference(arch_list)
            if not isinstance(got, (list, tuple)) or sorted(set(got)) != sorted(set(want)) or len(got) != len(set(got)):
                selfcheck.fail(NAME, where, f"got  {got!r}\nwant {sorted(want)} (in any order)", hint=HINT, seed=seed)
            cases += 1
    selfcheck.passed_now(NAME, f"{cases} architecture lists give torch's flags")
    return cases


_PTX = '        if arch.endswith("+PTX"):\n            flags.append(f"-gencode=arch=compute_{number},code=compute_{number}")\n'

WRONG = [
    Wrong(
        "+PTX ignored: machine code only, so a GPU newer than every listed one finds no kernel",
        [(_PTX, "")],
        "cpu",
    ),
    Wrong(
        "the dot kept: compute_7.5 and sm_7.5 are not names nvcc knows (compute_75, sm_75)",
        [('.removesuffix("+PTX").replace(".", "")', '.removesuffix("+PTX")')],
        "cpu",
    ),
    Wrong(
        "+PTX's PTX written as code=sm_XY: the same machine code twice and no PTX",
        [(_PTX, _PTX.replace("code=compute_{number}", "code=sm_{number}"))],
        "cpu",
    ),
    Wrong(
        "the list split on ';' only: '7.5 8.0' becomes one architecture named '7.5 8.0'",
        [('arch_list.replace(";", " ").split()', 'arch_list.split(";")')],
        "cpu",
    ),
]
