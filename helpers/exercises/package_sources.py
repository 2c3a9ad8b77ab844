"""Self-check for lesson 06's second exercise: kernels/exercises/package_sources.py, the files that make an op's
extension module in the wheel (Part 1, extension_sources) and the folders its includes are found in (Part 2,
include_dirs).

Part 1 is compared with the rule setup.py builds with (helpers.loader.sources_for, less the .cu files in a
CPU-only build) for every op in kernels/, with and without CUDA, and for ops made up afresh each run in a
scratch folder: a random name, some parts (NAME.PART.cpp/.cu), and the files that must stay out (headers, a
Triton kernel, another op whose name starts with this one's). Part 2 must put kernels/solutions (never kernels/exercises)
before kernels/. Nothing is compiled: the check takes a second."""

from __future__ import annotations

import contextlib
import random
import tempfile
from pathlib import Path

from .. import env, loader, selfcheck
from . import Wrong, python_module

OP = "polynomial"  # the op lesson 06 packages first
NAME = "package_sources"
FILE = "kernels/exercises/package_sources.py"
HINT = (
    "Part 1: every .cpp in kernels/NAME/ (and every .cu there when cuda); Path.glob on the op's folder finds "
    "them. Part 2: [kernels / 'solutions', kernels]. See " + FILE
)
_NAMES = ["swish", "mish", "softmax_xent", "batchnorm_relu", "attn_softmax", "csr_spmv", "gelu", "rope"]
_PARTS = ["exercises", "hopper", "tuned", "v2", "ampere"]


def reference(kernels: Path, name: str, cuda: bool) -> list[Path]:
    """setup.py's rule: the loader's sources_for(name), without .cu files in a CPU-only build."""
    was = loader.KERNELS
    loader.KERNELS = kernels
    try:
        return [s for s in loader.sources_for(name) if cuda or s.suffix != ".cu"]
    finally:
        loader.KERNELS = was


def _made_up_op(root: Path, rng: random.Random) -> str:
    """A kernels/ folder with one made-up op (some parts, CUDA or not) and the files that are not its sources."""
    name = rng.choice(_NAMES)
    has_cu = rng.random() < 0.8
    files = [f"{name}.cpp", f"{name}.h", f"{name}_cpu.h", f"{name}_common.cuh", f"{name}_triton.py"]
    files += [f"{name}.cu"] * has_cu
    for part in rng.sample(_PARTS, rng.randint(1, 3)):
        files += [f"{name}.{part}.cpp"] * (rng.random() < 0.7) + [f"{name}.{part}.cu"] * has_cu
    files = [f"{name}/{f}" for f in files]
    files += [f"{name}_fused/{name}_fused.cpp", f"{name}_fused/{name}_fused.cu", f"{name}2/{name}2.cpp"]  # not its
    files += ["common/common.h", "common/checks.h"]
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text(f"// {f}\n")
    for folder in ("solutions", "exercises"):
        (root / folder).mkdir()
        (root / folder / f"{name}_forward.cuh").write_text("// an exercise header\n")
    return name


def check(device=None, ext=None, seed=None) -> int:
    """Your extension_sources and include_dirs (kernels/exercises/package_sources.py, or `ext`, a module with
    both) against setup.py's rule, on kernels/ and on made-up ops. `device` is not used: nothing runs on it."""
    seed = selfcheck.new_seed(seed)
    mod = ext or python_module(NAME)
    rng = random.Random(seed)
    cases = 0

    def fail(where: str, message: str) -> None:
        selfcheck.fail(NAME, where, message, hint=HINT, seed=seed)

    def call(where: str, fn, *args):
        try:
            return fn(*args)
        except NotImplementedError:
            fail(where, f"a function in {FILE} is not written yet (it raises NotImplementedError)")
        except Exception as e:  # whatever it raises is a verdict, not a crash
            fail(where, f"raised {type(e).__name__}: {e}")

    def same_files(where: str, kernels: Path, name: str, cuda: bool) -> None:
        got = call(where, mod.extension_sources, kernels, name, cuda)
        want = reference(kernels, name, cuda)
        if not isinstance(got, (list, tuple)) or not all(isinstance(p, Path) for p in got):
            fail(where, f"extension_sources should return a list of Paths, got {got!r}")
        got_set, want_set = {p.resolve() for p in got}, {p.resolve() for p in want}
        if len(got) != len(got_set):
            fail(where, f"a file is listed twice: {sorted(p.name for p in got)}")
        if got_set != want_set:
            missing = sorted(p.name for p in want_set - got_set)
            extra = sorted(p.name for p in got_set - want_set)
            fail(
                where,
                f"op {name!r}, {'CUDA' if cuda else 'CPU-only'} build, files {sorted(p.name for p in (kernels / name).iterdir())}:"
                f"\n  missing {missing or 'nothing'}\n  not its sources, or not in this build: {extra or 'nothing'}",
            )

    with selfcheck.exercise(NAME), contextlib.ExitStack() as stack:
        for name in loader.op_names():
            for cuda in (True, False):
                same_files(f"Part 1, kernels/{name}/", env.KERNELS, name, cuda)
                cases += 1
        for i in range(6):
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="course-made-up-op-")))
            name = _made_up_op(root, rng)
            for cuda in (True, False):
                same_files(f"Part 1, a made-up op (case {i})", root, name, cuda)
                cases += 1
        for kernels in (env.KERNELS, root):
            got = call("Part 2", mod.include_dirs, kernels)
            got = [Path(p).resolve() for p in got or []]
            sol, exe, top = (kernels / "solutions").resolve(), (kernels / "exercises").resolve(), kernels.resolve()
            if exe in got:
                fail("Part 2", f"{exe} is on the include path: the wheel would compile a learner's stubs")
            if sol not in got or top not in got:
                fail("Part 2", f"include_dirs({kernels}) should hold {sol} and {top}, got {[str(p) for p in got]}")
            if got.index(sol) > got.index(top):
                fail("Part 2", "kernels/solutions should come before kernels/ (a header there wins)")
            cases += 1
    selfcheck.passed_now(NAME, f"{cases} cases passed (kernels/ and made-up ops, CUDA and CPU-only builds)")
    return cases


_GLOB_LINE = (
    '    return sorted(p for s in suffixes for p in (kernels / name).glob(f"*{s}"))  # the op\'s folder, no other\n'
)

WRONG = [
    Wrong(
        "only NAME.cpp and NAME.cu: the parts (NAME.exercises.cpp, ...) are left out, so the module links and then "
        "fails on import with 'undefined symbol'",
        [(_GLOB_LINE, '    return [p for s in suffixes if (p := kernels / name / f"{name}{s}").is_file()]\n')],
        "cpu",
    ),
    Wrong(
        "the .cu files kept in a CPU-only build: there is no nvcc to compile them",
        [('    suffixes = (".cpp", ".cu") if cuda else (".cpp",)\n', '    suffixes = (".cpp", ".cu")\n')],
        "cpu",
    ),
    Wrong(
        "the folders matched as NAME*: another op whose name starts with this one's (swish_fused/) is compiled in",
        [(_GLOB_LINE, '    return sorted(p for s in suffixes for p in kernels.glob(f"{name}*/*{s}"))\n')],
        "cpu",
    ),
    Wrong(
        "every file of the folder: its headers and its Triton .py are not translation units of their own",
        [(_GLOB_LINE, "    return sorted((kernels / name).iterdir())\n")],
        "cpu",
    ),
    Wrong(
        "kernels/exercises on the include path: the wheel would ship the learner's stubs, not the answers",
        [('    return [kernels / "solutions", kernels]\n', '    return [kernels / "exercises", kernels]\n')],
        "cpu",
    ),
]
