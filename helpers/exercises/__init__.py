"""Exercises: kernels/solutions/ is the source of truth, kernels/exercises/ is generated from it, and
helpers/exercises/<name>.py holds the self-check of kernels/solutions/<name>.* as `check(device=None)`.

In a solution file the answer sits between `// BEGIN SOLUTION` and `// END SOLUTION`; the learner's
copy replaces it with a TODO line, which compiles and leaves the output unwritten (the self-checks
poison outputs with NaN, so an unwritten output fails them).

    python -m helpers.exercises            # regenerate kernels/exercises/ (developers, after editing a solution)
    python -m helpers.exercises --check    # exit 1 if kernels/exercises/ is not what the solutions generate
"""

from __future__ import annotations

import re
from pathlib import Path

from ..env import KERNELS

SOLUTIONS, EXERCISES = KERNELS / "solutions", KERNELS / "exercises"
_BLOCK = re.compile(r"^([ \t]*)// BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*// END SOLUTION[^\n]*\n", re.M | re.S)


def make_stub(text: str) -> str:
    def todo(m: re.Match) -> str:
        lines = len([line for line in m.group(2).splitlines() if line.strip()])
        return f"{m.group(1)}// TODO(exercise): your code here (the solution is {lines} lines).\n"

    if not _BLOCK.search(text):
        raise ValueError("no // BEGIN SOLUTION ... // END SOLUTION block")
    return _BLOCK.sub(todo, text)


def expected() -> dict[Path, str]:
    return {EXERCISES / f.name: make_stub(f.read_text()) for f in sorted(SOLUTIONS.iterdir()) if f.is_file()}


def out_of_sync() -> list[Path]:
    return [p for p, text in expected().items() if not p.exists() or p.read_text() != text]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = out_of_sync()
        for p in bad:
            print(
                f"{p.relative_to(KERNELS.parent)} differs from the stub generated from kernels/solutions/{p.name}.\n"
                "  Learner: that is your work, nothing to fix. Developer: run `python -m helpers.exercises`."
            )
        return 1 if bad else 0
    EXERCISES.mkdir(exist_ok=True)
    for p, text in expected().items():
        p.write_text(text)
        print(f"wrote {p.relative_to(KERNELS.parent)}")
    return 0


def names() -> list[str]:
    """One name per exercise: the stem of each file in kernels/solutions/."""
    return sorted({f.name.split(".")[0] for f in SOLUTIONS.iterdir() if f.is_file()})
