"""Lesson 08, the capstone: your own op, course::swiglu, from an empty folder. This module finds the folder,
builds and loads what is in it, and runs your tests; helpers/grade.py grades it.

    capstone.folder()                  kernels/exercises/swiglu/ (yours), or kernels/solutions/swiglu/ (the
                                       course's answer) with COURSE_SOLUTIONS=1
    capstone.files(folder)             the checklist: each file the op needs, and whether the folder has it
    side = capstone.load(folder)       build the folder's .cpp and .cu files into one library (its
                                       TORCH_LIBRARY blocks register course::swiglu), then run its swiglu.py's
                                       register(lib): returns that Python module. Re-running it is safe.
    capstone.derivation(grad_gate, grad_up)   your backward formulas (functions of grad_y, gate, up) against
                                       autograd on the native composition, in float64
    capstone.run_tests(folder)         your test file under pytest in a child process: (passed, output)
    capstone.reference(x)              silu(gate) * up in float64, the answer everything is checked against

The folder is an op folder of the course's shape (kernels/square/, kernels/polynomial/ are others), plus the
Python side an op needs and its packaging: see kernels/exercises/swiglu/README.md.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import types
from pathlib import Path

import torch

from . import env, library, loader

NAME = "swiglu"
OPS = ("course::swiglu", "course::swiglu_backward")


def folder(solution: bool | None = None) -> Path:
    solution = env.solutions_enabled() if solution is None else solution
    return env.KERNELS / ("solutions" if solution else "exercises") / NAME


@dataclasses.dataclass
class Part:
    file: str
    what: str
    present: bool


# What goes where: the production checklist of the lesson, as files.
CHECKLIST = (
    ("swiglu.cu", "the CUDA kernels and their launchers (no torch headers: an edit rebuilds in a second)"),
    ("swiglu.h", "the launchers' declarations, as swiglu.cpp sees them"),
    ("swiglu.cpu.cpp", "the CPU loops (no torch headers either), declared in swiglu_cpu.h"),
    ("swiglu.cpp", "the glue: input checks, dtype dispatch, the TORCH_LIBRARY schemas and kernels"),
    ("swiglu.py", "the Python side: fake kernels and the autograd formula, in register(lib)"),
    ("test_swiglu.py", "your tests: pytest, with torch.library.opcheck"),
    ("wheel_entry.py", "the setup.py entry that puts the op in a wheel"),
)


def files(where: Path | None = None) -> list[Part]:
    where = Path(where or folder())
    return [Part(f, what, (where / f).is_file()) for f, what in CHECKLIST]


def sources(where: Path) -> list[Path]:
    """The folder's translation units, .cu only where a CUDA build compiles them (loader.load skips them else)."""
    return sorted(p for ext in ("cpp", "cu") for p in Path(where).glob(f"*.{ext}"))


class NotReady(RuntimeError):
    """The folder lacks what a step needs (raised with what to write next)."""


def _rel(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(env.REPO_ROOT))
    except ValueError:
        return str(p)


def build(where: Path | None = None, *, cuda: bool | None = None):
    """Build the folder's C++ and CUDA files as one library (the loader's cache: an edit recompiles that file)
    and load it: its registrations run. Returns the library's Python module."""
    where = Path(where or folder())
    srcs = sources(where)
    if not any(p.suffix == ".cpp" for p in srcs):
        raise NotReady(
            f"{_rel(where)}/ has no .cpp file yet: the op starts with its glue, swiglu.cpp (see README.md there)"
        )
    # The precompiled torch headers even on 2 cores: the glue is the learner's to write and edit, and an edit then
    # recompiles it in seconds (as a glue exercise's file does), not in most of a minute.
    return loader.load(NAME, sources=srcs, include_dirs=[where], cuda=cuda, pch=True)


def python_side(where: Path | None = None) -> types.ModuleType:
    """The folder's swiglu.py, executed afresh as a module (an edit counts at once)."""
    where = Path(where or folder())
    path = where / "swiglu.py"
    if not path.is_file():
        raise NotReady(f"{_rel(where)}/swiglu.py does not exist yet: the fake kernels and autograd formula go there")
    mod = types.ModuleType("course_capstone_swiglu")
    mod.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)
    if not callable(getattr(mod, "register", None)):
        raise NotReady(f"{_rel(path)} has no register(lib) function: the README says what it does")
    return mod


def load(where: Path | None = None, *, cuda: bool | None = None) -> types.ModuleType:
    """build(), then the Python side's register(lib) with a fresh Library fragment (so a re-run registers again).
    Returns the Python side's module; torch.ops.course.swiglu is the op."""
    build(where, cuda=cuda)
    side = python_side(where)
    side.register(library.fresh("capstone swiglu"))
    return side


def reference(x: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up in float64 (gate, up = the halves of x's last dimension): what the op is checked against."""
    gate, up = x.double().chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


def reference_grad(grad_y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """d(loss)/dx in float64 for d(loss)/dy = grad_y, by autograd through the native composition."""
    xd = x.detach().double().requires_grad_()
    reference(xd).backward(grad_y.double())
    return xd.grad


def derivation(grad_gate, grad_up, cases: int = 5, seed: int = 0) -> None:
    """Check your backward formulas before you write a kernel: grad_gate(grad_y, gate, up) and grad_up(grad_y,
    gate, up), written with torch functions, against autograd in float64 on random values (gate from -12 to 12,
    where silu bends and flattens). Raises AssertionError with the first wrong value."""
    g = torch.Generator().manual_seed(seed)
    for i in range(cases):
        x = torch.randn(7, 2 * 33, generator=g, dtype=torch.float64) * (1 + 3 * i)
        grad_y = torch.randn(7, 33, generator=g, dtype=torch.float64)
        want_gate, want_up = reference_grad(grad_y, x).chunk(2, dim=-1)
        gate, up = x.chunk(2, dim=-1)
        for name, fn, want in (("grad_gate", grad_gate, want_gate), ("grad_up", grad_up, want_up)):
            got = fn(grad_y, gate, up)
            try:
                torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
            except AssertionError as e:
                raise AssertionError(
                    f"{name} is not the derivative (case {i + 1}, gate up to {3 + 9 * i}):\n{e}"
                ) from None
    print(f"✅ derivation: grad_gate and grad_up match autograd on {cases} random cases in float64.")


def run_tests(where: Path | None = None, *, timeout: float = 900) -> tuple[bool, str]:
    """Your test_swiglu.py under pytest, in a child process (a crash cannot end the notebook), from the course
    folder so that `from helpers import capstone` works in it. Returns (passed, pytest's output)."""
    where = Path(where or folder())
    test = where / "test_swiglu.py"
    if not test.is_file():
        raise NotReady(f"{_rel(test)} does not exist yet: your tests of the op go there")
    child_env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(env.REPO_ROOT), os.environ.get("PYTHONPATH")]))
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(test)]
    try:
        r = subprocess.run(cmd, cwd=env.REPO_ROOT, env=child_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"pytest ran past {timeout:.0f} s"
    return r.returncode == 0, (r.stdout + r.stderr).strip()
