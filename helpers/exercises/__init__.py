"""Exercises: kernels/solutions/ is the source of truth, kernels/exercises/ is generated from it, and
helpers/exercises/<name>.py holds, for kernels/solutions/<name>.*:

    OP = "polynomial"                  # the op (kernels/OP/) whose build compiles the exercise (or, for a
                                       # Python exercise, whose C++ kernels it works with)
    def check(device=None, ext=None, seed=None) -> int
        # the self-check: every part the learner wrote (the CPU part, and the CUDA part in CUDA mode;
        # only `device` if given), on cases drawn afresh each run (selfcheck.run)
    WRONG = [Wrong(...), ...]          # mistakes learners really make; tests prove check() rejects each

A kernel exercise's header is compiled only by the op's torch-free parts (kernels/OP/OP.exercises.cpp / .cu), never
by kernels/OP/OP.cpp, so an edit to it rebuilds in about a second. A glue exercise (square_glue.h: glue,
autograd and binding; square_library.h: a registration) has torch's headers by nature: a file of its own
compiles it and nothing else of the op (kernels/square/square.glue.cpp, square.library.cpp), with the
precompiled torch header, so an edit rebuilds that one file in seconds (tests/infrastructure/test_style.py
checks both shapes).

In a solution file the answer sits between `// BEGIN SOLUTION` and `// END SOLUTION`; the learner's
copy replaces it with a TODO line, which compiles and leaves the output unwritten (the self-checks
poison outputs with NaN, so an unwritten output fails them). A find-and-fix exercise (lesson 07) adds, after
a `// STUB` line inside the block, the broken code commented out: the learner's copy starts from it.

A Python exercise (kernels/solutions/<name>.py, lesson 04: torch.library registrations) marks its answer with
`# BEGIN SOLUTION` / `# END SOLUTION`; the stub is a TODO line and `raise NotImplementedError`, which the
self-check reports as not done. Nothing is compiled: `python_module(name)` executes the learner's file (or
the solution's, with COURSE_SOLUTIONS=1) afresh on every call, so an edit counts at once, and `check(ext=...)`
takes such a module (a test passes a wrong answer's).

    python -m helpers.exercises            # regenerate kernels/exercises/ (developers, after editing a solution)
    python -m helpers.exercises --check    # exit 1 if kernels/exercises/ is not what the solutions generate
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import re
import tempfile
import types
from pathlib import Path

from .. import env
from ..env import KERNELS

SOLUTIONS, EXERCISES = KERNELS / "solutions", KERNELS / "exercises"
_BLOCK = re.compile(r"^([ \t]*)// BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*// END SOLUTION[^\n]*\n", re.M | re.S)
_PY_BLOCK = re.compile(r"^([ \t]*)# BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*# END SOLUTION[^\n]*\n", re.M | re.S)


_STUB = re.compile(r"^[ \t]*// STUB[^\n]*\n", re.M)


def _split_stub(block: str) -> tuple[str, str | None]:
    """A solution block's answer, and the code the learner starts from where the block has one: a find-and-fix
    exercise puts the broken code after a `// STUB` line, commented out (the solution file must compile the
    answer alone), and the stub gets it uncommented."""
    parts = _STUB.split(block, maxsplit=1)
    if len(parts) == 1:
        return block, None
    stub = "".join(re.sub(r"^([ \t]*)// ?", r"\1", line) for line in parts[1].splitlines(keepends=True))
    return parts[0], stub


def _lines(m: re.Match, comment: str | None = None) -> int:
    """Non-blank lines of the answer (and, given `comment`, not comment lines)."""
    lines = [line.strip() for line in m.group(2).splitlines()]
    return len([line for line in lines if line and not (comment and line.startswith(comment))])


def make_stub(text: str) -> str:
    """The learner's copy of a solution file: each marked answer replaced by a TODO line (C++), or by a TODO
    line and `raise NotImplementedError` (Python: a function must have a body, and a forgotten one should say so)."""

    def todo(m: re.Match) -> str:
        answer, stub = _split_stub(m.group(2))
        if stub is not None:  # a find-and-fix exercise: the learner starts from the broken code
            return (
                f"{m.group(1)}// TODO(exercise): find and fix the bugs in this code (the file's header says how many).\n"
                + stub
            )
        return f"{m.group(1)}// TODO(exercise): your code here (the solution is {_lines(m)} lines).\n"

    def py_todo(m: re.Match) -> str:
        indent = m.group(1)
        return (
            f"{indent}# TODO(exercise): your code here (the solution is {_lines(m, '#')} lines).\n"
            f'{indent}raise NotImplementedError("exercise: your code here")\n'
        )

    if _BLOCK.search(text):
        return _BLOCK.sub(todo, text)
    if _PY_BLOCK.search(text):
        return _PY_BLOCK.sub(py_todo, text)
    raise ValueError("no // BEGIN SOLUTION ... // END SOLUTION block (# BEGIN SOLUTION ... in Python)")


def _op_folder_stub(text: str) -> str:
    """A file of a practice op's folder: the stub where it has answer blocks, else the file as it is (a header of
    declarations, a README, the tests)."""
    return make_stub(text) if (_BLOCK.search(text) or _PY_BLOCK.search(text)) else text


def expected() -> dict[Path, str]:
    """Every file of kernels/exercises/ that is generated: one per exercise file of kernels/solutions/, and the
    learner's copy of each practice op's folder (lesson 09: helpers/practice)."""
    from ..practice import NAMES as PRACTICE

    out = {EXERCISES / f.name: make_stub(f.read_text()) for f in sorted(SOLUTIONS.iterdir()) if f.is_file()}
    for op in PRACTICE:
        src = SOLUTIONS / op
        if src.is_dir():
            for f in sorted(src.iterdir()):
                if f.is_file() and f.suffix in _OP_FOLDER_SUFFIXES:
                    out[EXERCISES / op / f.name] = _op_folder_stub(f.read_text())
    return out


_OP_FOLDER_SUFFIXES = {".h", ".cuh", ".cu", ".cpp", ".py", ".md"}


def out_of_sync() -> list[Path]:
    return [p for p, text in expected().items() if not p.exists() or p.read_text() != text]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = out_of_sync()
        for p in bad:
            print(
                f"{p.relative_to(KERNELS.parent)} differs from the stub generated from "
                f"kernels/solutions/{p.relative_to(EXERCISES)}.\n"
                "  Learner: that is your work, nothing to fix. Developer: run `python -m helpers.exercises`."
            )
        return 1 if bad else 0
    EXERCISES.mkdir(exist_ok=True)
    for p, text in expected().items():
        p.parent.mkdir(exist_ok=True)
        p.write_text(text)
        print(f"wrote {p.relative_to(KERNELS.parent)}")
    return 0


def names() -> list[str]:
    """One name per exercise: the stem of each file in kernels/solutions/."""
    return sorted({f.name.split(".")[0] for f in SOLUTIONS.iterdir() if f.is_file()})


@dataclasses.dataclass
class Wrong:
    """A wrong answer, as a learner writes it: the solution with `edits` applied (each `old` text must occur
    exactly once in the solution file, so a test notices when the solution changes under it). `part` is
    the part it breaks, "cpu" or "cuda": the self-check on that device must reject it."""

    why: str
    edits: list[tuple[str, str]]
    part: str
    file: str | None = None  # the solution file it edits (default: the exercise's only file)
    min_free_gib: float = 0  # free GPU memory the self-check needs to catch it (the 2^32-element case)


def module(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def solution_file(name: str, wrong: Wrong | None = None) -> Path:
    if wrong is not None and wrong.file:
        return SOLUTIONS / wrong.file
    files = sorted(f for f in SOLUTIONS.iterdir() if f.is_file() and f.name.split(".")[0] == name)
    if len(files) != 1:
        raise ValueError(f"exercise {name} has {len(files)} solution files: name the one with Wrong(file=...)")
    return files[0]


def apply_wrong(name: str, wrong: Wrong) -> str:
    """The text of the solution file with the wrong answer's edits applied."""
    path = solution_file(name, wrong)
    text = path.read_text()
    for old, new in wrong.edits:
        n = text.count(old)
        if n != 1:
            raise ValueError(f"wrong answer {wrong.why!r}: {old!r} occurs {n} times in {path.name}, expected once")
        text = text.replace(old, new)
    return text


@contextlib.contextmanager
def _solutions_on():
    was = os.environ.get("COURSE_SOLUTIONS")
    os.environ["COURSE_SOLUTIONS"] = "1"
    try:
        yield
    finally:
        if was is None:
            del os.environ["COURSE_SOLUTIONS"]
        else:
            os.environ["COURSE_SOLUTIONS"] = was


def python_module(name: str, *, solution: bool | None = None, text: str | None = None):
    """A Python exercise's file, executed afresh as a module (edits count at once): kernels/exercises/NAME.py,
    or kernels/solutions/NAME.py with solution=True (default: COURSE_SOLUTIONS), or `text` in its place."""
    solution = env.solutions_enabled() if solution is None else solution
    path = (SOLUTIONS if solution else EXERCISES) / f"{name}.py"
    mod = types.ModuleType(f"course_exercise_{name}")
    mod.__file__ = str(path)
    source = path.read_text() if text is None else text
    exec(compile(source, str(path) if text is None else f"{path} (a wrong answer)", "exec"), mod.__dict__)
    return mod


def _includers(header: str) -> list[Path]:
    """The solution files that include `header`, directly or through another solution file."""
    found: set[str] = {header}
    files = [f for f in SOLUTIONS.iterdir() if f.is_file() and f.suffix != ".py"]
    grew = True
    while grew:
        grew = False
        for f in files:
            if f.name not in found and any(f'"{h}"' in f.read_text() for h in found):
                found.add(f.name)
                grew = True
    return [f for f in files if f.name in found and f.name != header]


def build_wrong(name: str, wrong: Wrong, cuda: bool | None = None):
    """The op of exercise `name` built with this wrong answer in place of the solution (the other exercise
    files are the solutions). Returns the loaded extension; for a Python exercise, the wrong file as a module."""
    from .. import loader

    mod = module(name)
    path = solution_file(name, wrong)
    if path.suffix == ".py":
        return python_module(name, text=apply_wrong(name, wrong))
    with tempfile.TemporaryDirectory(prefix=f"wrong-{name}-") as tmp:
        # Beside it, the solutions that include it (directly or not): a solution that includes another ("x.cuh")
        # finds the one in its own folder first, so the wrong file must replace it there, not only come first
        # on the include path. The others stay where they are, so the files that compile them (another glue
        # exercise's, with torch's headers) are the cached objects, not compiled again for every wrong answer.
        for f in _includers(path.name):
            (Path(tmp) / f.name).write_text(f.read_text())
        (Path(tmp) / path.name).write_text(apply_wrong(name, wrong))
        with _solutions_on():
            return loader.load(mod.OP, include_dirs=[tmp], cuda=cuda)


# Mistakes every one-thread-per-element exercise invites, built from the solution's own line.
_INDEX = "blockIdx.x * int64_t(blockDim.x) + threadIdx.x"


def index_without_block(line: str, what: str = "elements") -> Wrong:
    """`line` computes the index as blockIdx.x * int64_t(blockDim.x) + threadIdx.x; the wrong one drops blockIdx."""
    return Wrong(
        f"the index is threadIdx.x only: every block computes the first blockDim.x {what} again, the rest is never "
        "written",
        [(line, line.replace(_INDEX, "threadIdx.x"))],
        "cuda",
    )


def index_in_32_bits(line: str, buffers: int) -> Wrong:
    """The product blockIdx.x * blockDim.x in unsigned 32-bit arithmetic, widened only after it wrapped: only
    selfcheck.large_case's 2^32-element case (`buffers` bfloat16 tensors) catches it."""
    return Wrong(
        "the index computed in 32 bits (blockIdx.x * blockDim.x is unsigned int) and only then widened: it wraps "
        "past 2^32 elements (selfcheck.large_case catches it where the GPU has the memory, as on an H100)",
        [(line, line.replace(_INDEX, "blockIdx.x * blockDim.x + threadIdx.x"))],
        "cuda",
        min_free_gib=buffers * ((1 << 32) + 4099) * 2 / 0.8 / 2**30,
    )


def loop_one_short(line: str) -> Wrong:
    """`line` holds the CPU loop's `i < n;`: the wrong one stops at n - 1."""
    return Wrong(
        "the loop stops one short (i < n - 1): the last element is never written",
        [(line, line.replace("i < n;", "i < n - 1;"))],
        "cpu",
    )
