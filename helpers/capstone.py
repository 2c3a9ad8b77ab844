"""Lesson 08, the capstone: your own op, course::swiglu, from an empty folder. This module finds the folder,
builds and loads what is in it, and runs your tests; helpers/grade.py grades it.

    capstone.folder()                  kernels/exercises/swiglu/ (yours), or kernels/solutions/swiglu/ (the
                                       course's answer) with COURSE_SOLUTIONS=1
    capstone.files(folder)             the checklist: each file the op needs, and whether the folder has it
    side = capstone.load(folder)       build the folder's .cpp and .cu files into one library (its
                                       TORCH_LIBRARY blocks register course::swiglu), then run its swiglu.py's
                                       register(lib): returns that Python module. Re-running it is safe.
    capstone.run_tests(folder)         your test file under pytest in a child process: (passed, output)
    capstone.reference(x)              silu(gate) * up in float64, the answer everything is checked against

The folder is an op folder of the course's shape (kernels/square/, kernels/polynomial/ are others), plus the
Python side an op needs and its packaging: see kernels/exercises/swiglu/README.md.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
from pathlib import Path

import torch

from . import env, library, loader, selfcheck

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


def build(where: Path | None = None, *, cuda: bool | None = None, name: str = NAME):
    """Build the folder's C++ and CUDA files as one library named `name` (the loader's cache: an edit recompiles
    that file) and load it: its registrations run. Returns the library's Python module."""
    where = Path(where or folder())
    srcs = sources(where)
    if not any(p.suffix == ".cpp" for p in srcs):
        raise NotReady(
            f"{_rel(where)}/ has no .cpp file yet: the op starts with its glue, {name}.cpp (see README.md there)"
        )
    # The precompiled torch headers even on 2 cores: the glue is the learner's to write and edit, and an edit then
    # recompiles it in seconds (as a glue exercise's file does), not in most of a minute.
    return loader.load(name, sources=srcs, include_dirs=[where], cuda=cuda, pch=True)


def python_side(where: Path | None = None, *, name: str = NAME) -> types.ModuleType:
    """The folder's NAME.py, executed afresh as a module (an edit counts at once)."""
    where = Path(where or folder())
    path = where / f"{name}.py"
    if not path.is_file():
        raise NotReady(f"{_rel(where)}/{name}.py does not exist yet: the fake kernels and autograd formula go there")
    mod = types.ModuleType(f"course_op_{name}")
    mod.__file__ = str(path)
    sys.modules[mod.__name__] = mod  # torch.compile looks functions' modules up by name when it traces them
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)
    if not callable(getattr(mod, "register", None)):
        raise NotReady(f"{_rel(path)} has no register(lib) function: the README says what it does")
    return mod


def load(where: Path | None = None, *, cuda: bool | None = None, name: str = NAME) -> types.ModuleType:
    """build(), then the Python side's register(lib) with a fresh Library fragment (so a re-run registers again).
    Returns the Python side's module; torch.ops.course.NAME is the op. `name`: the op of an op folder of this
    shape other than the capstone's (lesson 09's practice ops, lesson 08's stretch step)."""
    build(where, cuda=cuda, name=name)
    side = python_side(where, name=name)
    side.register(library.fresh(f"op folder {name}"))
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


def run_tests(where: Path | None = None, *, timeout: float = 900) -> tuple[bool, str]:
    """Your test_swiglu.py under pytest, in a child process (a crash cannot end the notebook), from the course
    folder so that `from helpers import capstone` works in it. Returns (passed, pytest's output)."""
    where = Path(where or folder())
    test = where / "test_swiglu.py"
    if not test.is_file():
        raise NotReady(f"{_rel(test)} does not exist yet: your tests of the op go there")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(test)]
    try:
        r = subprocess.run(
            cmd, cwd=env.REPO_ROOT, env=env.child_environ(), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return False, f"pytest ran past {timeout:.0f} s"
    return r.returncode == 0, (r.stdout + r.stderr).strip()


# --------------------------------------------------------------------------------------------------
# The lesson's self-checks: one per step, each failing the way an exercise's self-check does
# --------------------------------------------------------------------------------------------------

# The grader's checks that each step's files must pass (helpers/grade.py runs them in a child process).
STEPS = {
    "kernels": ["build", "registered", "forward", "inputs_unchanged", "errors"],
    "python side": ["backward", "saves_only_x", "opcheck", "compile", "autocast"],
}
HINTS = {
    "build": "the README in your folder lists the files; the build error above names the file and line",
    "registered": "COURSE_LIBRARY(m) { define(m, ...); } with the schemas exactly as the README writes them, and "
    "COURSE_IMPL_CPU_CUDA(m) { m.impl(...); } with your C++ functions (lesson 04, kernels/square/)",
    "forward": "compare the case with your loop: the last column, the second half's offset (h, not 2h), strided "
    "input (.contiguous() in the glue), the dtypes' conversions (the math in float)",
    "inputs_unchanged": "the kernels read x and grad_y (const pointers) and write only their own output",
    "errors": "check every argument in the glue before using it, and name it in the message: the checks of "
    'common/checks.h (check_floating(x, "x"), check_shape(grad_y, "grad_y", ...)) do both',
    "backward": "swiglu.py's register(lib) registers the autograd formula (torch.library.register_autograd): "
    "setup_context saves x, backward calls torch.ops.course.swiglu_backward",
    "saves_only_x": "ctx.save_for_backward(x) and nothing else: backward recomputes sigmoid(gate) from x",
    "opcheck": "the fake kernels: a new tensor of the kernel's output shape, dtype and strides (x.new_empty(...)), "
    "computing nothing; both ops need one",
    "compile": "torch.compile traces through the fake kernels and the autograd formula: call the ops through "
    "torch.ops.course in backward",
    "autocast": "silu and mul run in their inputs' dtype under autocast: the op needs no autocast rule",
}


def _fail(name: str, report, seed: int) -> None:
    first = report.failed[0]
    where = f"the grader's check {first.check}" + (f", case: {first.case}" if first.case else "")
    selfcheck.fail(name, where, first.detail, hint=HINTS.get(first.check, ""), seed=seed)


def check(step: str, *, where: Path | None = None, seed: int | None = None):
    """Step `step` ("kernels": swiglu.cu/.h, the CPU loops and the glue; "python side": swiglu.py) through the
    grader's checks for it, in a child process. Prints one line per check; raises AssertionError
    ("capstone STEP: not yet. ...") with the first failure, its case and a hint. Returns the grader's Report."""
    from . import grade

    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}, got {step!r}")
    name = f"capstone {step}"
    seed = selfcheck.new_seed(seed)
    with selfcheck.exercise(name):
        report = grade.op(folder=where or folder(), checks=STEPS[step], seed=seed, quiet=True)
        for r in report.results:
            print(f"  {grade.ICONS[r.status]} {r.check}: {(r.detail.splitlines() or [''])[0]}")
        if report.failed:
            _fail(name, report, seed)
        selfcheck.passed_now(name, f"{len(report.results)} checks of the grader passed.")
    return report


# The bugs a learner's tests must catch: corpus entries a good test file fails on.
BUGS_TESTS_CATCH = ("cpu_loop_one_short", "derivative_missing_a_term", "fake_of_the_wrong_shape")


def check_tests(where: Path | None = None, *, seed: int | None = None) -> int:
    """Your test_swiglu.py: it passes on your op, it uses opcheck and gradcheck, and it fails on three ops with a
    typical bug each (helpers/grade_corpus.py: a loop one short, a derivative missing a term, a fake of the wrong
    shape), run in their folders in place of the solution's tests. Returns the number of bugs caught."""
    import tempfile

    from . import grade_corpus

    name = "capstone tests"
    seed = selfcheck.new_seed(seed)
    where = Path(where or folder())
    hint = (
        "a test per promise of the op: values against a float64 reference (several shapes, dtypes, a strided x), "
        "gradcheck in float64, torch.library.opcheck, bad input; see test_swiglu.py's place in the README"
    )
    with selfcheck.exercise(name):
        test = _needed(name, where, "test_swiglu.py", hint, seed)
        text = test.read_text()
        for needed in ("opcheck", "gradcheck"):
            if needed not in text:
                selfcheck.fail(name, _rel(test), f"your tests never call {needed}", hint=hint, seed=seed)
        passed, output = run_tests(where)
        if not passed:
            selfcheck.fail(name, "your tests on your op", "they fail:\n" + _tail(output), hint=hint, seed=seed)
        caught = 0
        with tempfile.TemporaryDirectory(prefix="capstone-tests-") as tmp:
            for bug in BUGS_TESTS_CATCH:
                entry = grade_corpus.BY_NAME[bug]
                wrong = grade_corpus.materialize(entry, Path(tmp))
                (wrong / "test_swiglu.py").unlink()
                (wrong / "test_swiglu.py").write_text(text)
                passed, output = run_tests(wrong)
                if passed:
                    selfcheck.fail(
                        name,
                        f"your tests on an op with a bug: {entry.why}",
                        "every test passed: they do not catch it",
                        hint=hint,
                        seed=seed,
                    )
                caught += 1
        selfcheck.passed_now(name, f"your tests pass on your op and catch {caught} of {caught} typical bugs.")
    return caught


def _needed(name: str, where: Path, file: str, hint: str, seed: int) -> Path:
    """where/file, or the step's failure saying it does not exist yet."""
    path = where / file
    if not path.is_file():
        selfcheck.fail(name, _rel(where), f"{_rel(path)} does not exist yet", hint=hint, seed=seed)
    return path


def _tail(output: str, lines: int = 25) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])


def check_wheel(where: Path | None = None, *, seed: int | None = None) -> str:
    """Your wheel_entry.py: the course's setup.py builds a wheel with your op alone (COURSE_ENTRY), it installs
    into an empty folder, and a new Python process that sees only that folder imports course_ops and runs
    course::swiglu forward and backward, with the right values. Returns the wheel's file name."""
    import tempfile

    from . import wheel

    name = "capstone wheel"
    seed = selfcheck.new_seed(seed)
    where = Path(where or folder())
    hint = (
        "extension(kernels, headers, cuda, flags) returns a CppExtension or CUDAExtension named course_ops.swiglu, "
        "with every .cpp (and .cu in a CUDA wheel) of your folder, the folder and kernels/ as include_dirs, "
        'WITH_CUDA defined in a CUDA wheel; PYTHON_SIDE = ["swiglu.py"] (lesson 06\'s exercise)'
    )
    program = (
        "import torch, course_ops\n"
        "x = torch.randn(5, 2 * 7, dtype=torch.float64, requires_grad=True)\n"
        "y = torch.ops.course.swiglu(x)\n"
        "y.backward(torch.ones_like(y))\n"
        "gate, up = x.detach().chunk(2, dim=-1)\n"
        "want = torch.nn.functional.silu(gate) * up\n"
        "print('max error', float((y.detach() - want).abs().max()), 'grad', tuple(x.grad.shape), course_ops.OPS)\n"
    )
    with selfcheck.exercise(name):
        entry = _needed(name, where, "wheel_entry.py", hint, seed)
        with tempfile.TemporaryDirectory(prefix="capstone-wheel-") as tmp:
            try:
                built = wheel.build(Path(tmp) / "dist", cuda=env.cuda_mode(), entry=entry, headers=where)
                site = wheel.install(built.path, Path(tmp) / "site")
                out = wheel.run_fresh(site, program)
            except Exception as e:  # noqa: BLE001  (a build, install or import error: its text says which)
                selfcheck.fail(
                    name, "building, installing and importing the wheel", _tail(str(e)), hint=hint, seed=seed
                )
            line = next((ln for ln in out.splitlines() if ln.startswith("max error")), "")
            err = float(line.split()[2]) if line else float("inf")
            if not line or err > 1e-9 or "swiglu" not in line:
                selfcheck.fail(
                    name, "the installed op in a new process", f"it printed:\n{_tail(out)}", hint=hint, seed=seed
                )
            wheel_name = built.path.name
        selfcheck.passed_now(name, f"{wheel_name} built, installed, and course::swiglu ran from it in a new process.")
    return wheel_name


def check_grade(where: Path | None = None, *, seed: int | None = None):
    """The whole grader on your folder; passes when every check this machine can run passes."""
    from . import grade

    name = "capstone grade"
    seed = selfcheck.new_seed(seed)
    with selfcheck.exercise(name):
        report = grade.op(folder=where or folder(), seed=seed)
        if not report.passed:
            _fail(name, report, seed)
        selfcheck.passed_now(name, report.verdict())
    return report
