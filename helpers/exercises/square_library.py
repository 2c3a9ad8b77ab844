"""Self-check for lesson 04's first exercise: kernels/exercises/square_library.h, the C++ registration of
course::square and course::square_backward (their schemas with define() in COURSE_LIBRARY, their kernels for
CPU and CUDA tensors in COURSE_IMPL_CPU_CUDA), compiled by kernels/square/square.library.cpp.

A C++ registration runs while the shared library loads, inside dlopen, where an error cannot be caught: a
kernel whose arguments do not match its schema, or a second definition of a schema, ends the process (in
Jupyter, the kernel dies). So this check loads your build in a *child process* first and looks at what it
registered there: both ops, their schemas exactly, a CPU kernel (and a CUDA one in a CUDA build), the values
they compute, the same build loaded a second time in the same process (what the notebook does after you edit
and re-run), and torch.library.opcheck with the course's fake kernels and autograd (registered in the child
only). Only a registration the child approves is loaded into your notebook's process.

Exercises 2 and 3 (square_fake, test_square_op) and lesson 04b's square_autograd call `require(...)` first:
it fails with "not yet: exercise 1 ... registers course::square first" until this exercise is done."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from .. import env, selfcheck
from . import SOLUTIONS, Wrong, _solutions_on

OP = "square"
NAME = "square_library"
FILE = "kernels/exercises/square_library.h"
SCHEMAS = {
    "course::square": "course::square(Tensor x) -> Tensor",
    "course::square_backward": "course::square_backward(Tensor grad_y, Tensor x) -> Tensor",
}
HINT = (
    "kernels/common/library.h opens with the course's helpers for a registration: one block for the schemas "
    "(written with its define()), one for kernels that take CPU and CUDA tensors alike; kernels/polynomial/"
    "polynomial.cpp ends with course::polynomial's registration, and lesson 04's section 2 has the schema "
    "language. Avoid m.def and TORCH_LIBRARY: a second load in the same process kills it. See " + FILE
)
NOT_YET = "not yet: exercise 1 (kernels/exercises/square_library.h) registers course::square first"

_approved: set[str] = set()  # digests of registrations (the exercise file's text) a child process approved
_rejected: dict[str, dict] = {}  # the same for the verdicts that refused one (not a build error: that may pass)


# --------------------------------------------------------------------------------------------------
# The parent: what the learner runs
# --------------------------------------------------------------------------------------------------


def _file(solution: bool, answer_dir: Path | None = None) -> Path:
    if answer_dir is not None:
        return Path(answer_dir) / "square_library.h"
    return (SOLUTIONS if solution else env.KERNELS / "exercises") / "square_library.h"


def _code(text: str) -> str:
    """The C++ without its comments (so a comment that names TORCH_LIBRARY is not taken for code)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def _read_the_code(text: str) -> tuple[str, str] | None:
    """(where, message) for what the file's text shows is wrong before anything is built, else None."""
    code = _code(text)
    if re.search(r"\bTORCH_LIBRARY\s*\(", code) or re.search(r"[.>]\s*def\s*\(", code):
        return (
            "reading your file (before building it)",
            "it defines a schema with a raw TORCH_LIBRARY(...) or m.def(...). That works the first time; but the "
            "notebook loads your op again whenever you edit the file and re-run a cell, and a second TORCH_LIBRARY "
            "of the namespace, or a second m.def of the same schema, throws inside dlopen, where nothing can catch "
            'it: the Jupyter kernel dies. Write the schemas with define(m, "...") inside COURSE_LIBRARY(m) '
            "(kernels/common/library.h explains why).",
        )
    registers = "impl(" in code or "COURSE_IMPL_CPU_CUDA" in code
    if registers and not env.cuda_mode() and "COURSE_IMPL_CPU_CUDA" not in code and not re.search(r"\bCUDA\s*,", code):
        # In a CPU build both ways register the CPU kernel only; the text tells them apart (on a GPU machine,
        # the child's dispatch table does).
        return (
            "reading your file (a CPU build, so the CUDA registration is read, not run)",
            "your registration names CPU tensors only: on a GPU machine torch.ops.course.square(x.cuda()) would "
            "fail with \"Could not run 'course::square' with arguments from the 'CUDA' backend\". The kernels "
            "take CPU and CUDA tensors alike: register them for both (kernels/common/library.h has the macro).",
        )
    return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _probe(*, so: str | None, answer_dir: Path | None, device, seed: int, full: bool, solution: bool) -> dict:
    """Run _child() in a fresh process; its verdict as a dict (ok, where, message, why, cases)."""
    repo = str(env.REPO_ROOT)
    child_env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    )
    child_env["COURSE_SOLUTIONS"] = "1" if solution else "0"
    args = {"so": so, "answer_dir": str(answer_dir) if answer_dir else None, "seed": seed, "full": full}
    args["device"] = str(device) if device is not None else None
    p = subprocess.run(
        [sys.executable, "-m", __name__, json.dumps(args)],
        env=child_env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    stages = [line[len("STAGE ") :] for line in p.stdout.splitlines() if line.startswith("STAGE ")]
    said = _torch_said(p.stderr)
    if stages and stages[-1] == "reload":
        return {
            "ok": False,
            "where": "loading your build a second time in one process (what the notebook does after an edit)",
            "message": "the first load worked, the second ended the process (in a notebook: the Jupyter kernel dies). "
            f'PyTorch said:\n    {said}\nA raw m.def or TORCH_LIBRARY runs once per process; define(m, "...") '
            "inside COURSE_LIBRARY(m) skips a schema the process already has (kernels/common/library.h).",
        }
    if stages and stages[-1] == "load":
        return {
            "ok": False,
            "where": "loading your build (in a child process: here it would have killed the notebook's kernel)",
            "message": f"the registration ended the process while the library loaded. PyTorch said:\n    {said}\n"
            "A kernel whose C++ arguments and result do not match the schema it is registered under is refused "
            "this way: compare each m.impl's function (square.library.cpp declares them) with its schema.",
        }
    return {
        "ok": False,
        "where": "the child process that checks your registration",
        "message": f"it ended with exit code {p.returncode}:\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}",
    }


def _torch_said(stderr: str) -> str:
    """The message of the C++ exception that ended the child (after `what():`), a few lines."""
    text = stderr.split("what():", 1)[-1] if "what():" in stderr else stderr[-1500:]
    lines = []
    for line in text.strip().splitlines():
        if line.startswith("Exception raised from") or (lines and not line.strip()):
            break
        lines.append(line.strip())
    return "\n    ".join(lines[:4]) or "(nothing)"


def check(device=None, ext=None, seed=None, answer_dir=None) -> int:
    """Your registration, loaded in a child process first (see the module's docstring). `ext`: a build of the op
    already loaded (a test passes a wrong answer's); `answer_dir`: a folder with a square_library.h to build in
    the child instead of yours (a test passes a wrong answer that would end the process that loads it)."""
    seed = selfcheck.new_seed(seed)
    solution = env.solutions_enabled()
    with selfcheck.exercise(NAME):
        text = None
        if ext is None:
            path = _file(solution, answer_dir)
            text = path.read_text()
            wrong = _read_the_code(text)
            if wrong:
                selfcheck.fail(NAME, wrong[0], wrong[1], hint=HINT, seed=seed)
        so = getattr(ext, "__file__", None) if ext is not None else None
        result = _probe(so=so, answer_dir=answer_dir, device=device, seed=seed, full=True, solution=solution)
        if not result["ok"]:
            selfcheck.fail(NAME, result["where"], result["message"], hint=HINT, seed=seed, why=result.get("why", ""))
        if text is not None and answer_dir is None:
            _approved.add(_digest(text))
            from .. import loader

            loader.load(OP)  # approved: now the notebook's process has course::square too
        selfcheck.passed_now(
            NAME,
            f"course::square and course::square_backward are registered with the right schemas and kernels "
            f"({result['cases']} cases: values, a second load in one process, opcheck with the course's fake "
            "kernels and autograd).",
        )
    return result["cases"]


def require(caller: str, *, solution: bool | None = None):
    """For the exercises after this one: course::square loaded in this process as exercise 1 registers it (the
    solution with solution=True, as a test of a later exercise's wrong answer wants), or AssertionError
    "CALLER: not yet: exercise 1 ... registers course::square first" when that registration is not done.
    Returns the op's module (lesson 02's pybind functions besides the registration)."""
    from .. import loader

    solution = env.solutions_enabled() if solution is None else solution
    text = _file(solution).read_text()
    key = _digest(text)
    if key not in _approved:
        wrong = _read_the_code(text)
        result = _rejected.get(key) or (
            {"ok": False, "where": wrong[0], "message": wrong[1]}
            if wrong
            else _probe(so=None, answer_dir=None, device=None, seed=0, full=False, solution=solution)
        )
        if not result["ok"]:
            if result["where"] != "building your file":
                _rejected[key] = result
            first = result["message"].splitlines()[0]
            msg = (
                f"{caller}: {NOT_YET}.\nIts self-check (lesson 04, exercise 1) says: {first}\n"
                f"Hint: run exercise 1's self-check cell and do what it says; {Path(FILE).name} is {FILE}."
            )
            print("❌ " + msg.splitlines()[0])
            raise AssertionError(msg) from None
        _approved.add(key)
    if solution:
        with _solutions_on():
            return loader.load(OP)
    return loader.load(OP)


# --------------------------------------------------------------------------------------------------
# The child: a fresh process that loads the build and reports what it registered
# --------------------------------------------------------------------------------------------------


class _Verdict(Exception):
    def __init__(self, where: str, message: str, why: str = ""):
        super().__init__(message)
        self.where, self.message, self.why = where, message, why


def _stage(name: str) -> None:
    print(f"STAGE {name}", flush=True)


def _schema_problems(got: str, want: str) -> str:
    import torch

    g, w = torch._C.parse_schema(got), torch._C.parse_schema(want)
    out = []
    if any(a.alias_info is not None for a in [*g.arguments, *g.returns]):
        out.append(
            "an alias annotation such as (a!) says the op writes that tensor in place (or returns a view of it): "
            "this kernel reads x and returns a new tensor, and torch.compile trusts the schema"
        )
    if [a.name for a in g.arguments] != [a.name for a in w.arguments]:
        out.append(
            f"the arguments are ({', '.join(a.name for a in g.arguments)}), the exercise's are "
            f"({', '.join(a.name for a in w.arguments)}): the names are the op's keywords "
            "(torch.ops.course.square(x=t)), and their order is the order of the kernel's parameters"
        )
    if [str(a.type) for a in g.returns] != [str(a.type) for a in w.returns]:
        out.append(f"it returns ({', '.join(str(a.type) for a in g.returns)}); the kernel returns one Tensor")
    return "; ".join(out) or "the types differ"


def _child(args: dict) -> dict:
    import ctypes
    import shutil
    import tempfile

    import torch

    from .. import check as _check
    from .. import library, loader
    from . import python_module

    cases = 0
    _stage("load")
    if args["so"]:
        so = args["so"]
        ctypes.CDLL(so)
    else:
        try:
            so = loader.load(OP, include_dirs=[args["answer_dir"]] if args["answer_dir"] else []).__file__
        except loader.BuildError as e:
            raise _Verdict("building your file", f"it does not compile:\n{str(e)[:3000]}") from None
    _stage("inspect")
    ops = {}
    for qualname, want in SCHEMAS.items():
        name = qualname.split("::")[1]
        try:
            ops[qualname] = getattr(torch.ops.course, name).default
        except (AttributeError, RuntimeError):
            raise _Verdict(
                qualname,
                f"nothing registers {qualname} yet: its schema goes in the COURSE_LIBRARY(m) block and its kernels in "
                f"the COURSE_IMPL_CPU_CUDA(m) block of {FILE}.",
            ) from None
        got = str(ops[qualname]._schema)
        if got != want:
            raise _Verdict(
                f"{qualname}'s schema",
                f"it is\n    {got}\nthe exercise asks for\n    {want}\n({_schema_problems(got, want)}).",
            )
        keys = ["CPU"] + (["CUDA"] if env.cuda_mode() else [])
        for key in keys:
            if not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key):
                raise _Verdict(
                    f"{qualname}'s kernels",
                    f"it has no kernel for {key} tensors: the kernels take CPU and CUDA tensors alike, so register "
                    "each for both (the dispatcher's table: library.kernels(\"" + qualname + '")).',
                )
        cases += 1
    g = torch.Generator().manual_seed(int(args["seed"]))
    devices = selfcheck.parts(args["device"])

    def values(label: str) -> int:
        n = 0
        for dev in devices:
            for dtype in selfcheck.DTYPES:
                for shape, layout in (((1151,), None), ((7, 129), "t"), ((0, 3), None), ((), None)):
                    x = torch.randn(shape, generator=g).to(dtype)
                    gy = torch.randn(shape, generator=g).to(dtype)
                    if layout == "t":
                        x, gy = x.t(), gy.t()
                    x, gy = x.to(dev), gy.to(dev)
                    where = f"{label}, x of shape {list(x.shape)}, {str(dtype)[6:]} on {dev}"
                    try:
                        with _check.poisoned():
                            y, gx = ops["course::square"](x), ops["course::square_backward"](gy, x)
                    except Exception as e:
                        raise _Verdict(where, f"the op raised {library.first_lines(e, 3)}") from None
                    for got, want, what in (
                        (y, (x.double() ** 2).to(dtype), "course::square(x), x * x"),
                        (gx, (2 * x.double() * gy.double()).to(dtype), "course::square_backward(grad_y, x)"),
                    ):
                        try:
                            _check.assert_close(got, want, name=what)
                        except AssertionError as e:
                            raise _Verdict(where, f"{e}\n(Which kernel did you register under which name?)") from None
                    n += 1
        return n

    cases += values("the ops")
    _stage("reload")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / ("again." + Path(so).name)
        shutil.copyfile(so, copy)
        ctypes.CDLL(str(copy))  # a second build of the same op in one process, as after an edit
    _stage("after reload")
    cases += values("after a second load of your build")
    if args["full"]:
        _stage("opcheck")
        lib = torch.library.Library("course", "FRAGMENT")
        python_module("square_fake", solution=True).register(lib)
        python_module("square_autograd", solution=True).register(lib)
        library._forget_dispatch_caches()
        # opcheck's traced-and-compiled test and torch.compile run the fake and autograd kernels, which are the
        # same Python for every device: on one device, the last (the GPU where there is one), they cost half
        traced_on = devices[-1]
        for dev in devices:
            x = torch.randn(5, 7, generator=g).to(dev)
            samples = {
                "course::square": [(x,), (x.t().requires_grad_(),), (x.double().requires_grad_(),)],
                "course::square_backward": [
                    (torch.randn_like(x), x),
                    (torch.randn_like(x).t().requires_grad_(), x.t().requires_grad_()),
                ],
            }
            for qualname, sample_list in samples.items():
                for i, sample in enumerate(sample_list):
                    where = f"torch.library.opcheck({qualname}), x of shape {list(sample[-1].shape)} on {dev}"
                    # the traced-and-compiled test (most of opcheck's time) on one sample per op, the second,
                    # whose inputs require grad (so it compiles the backward too): the fake and autograd
                    # kernels it runs are the course's, and the layouts are the other tests' business
                    tests = library.OPCHECK_TESTS if i == 1 and dev == traced_on else library.OPCHECK_TESTS[:-1]
                    try:
                        torch.library.opcheck(ops[qualname], sample, test_utils=tests)
                    except Exception as e:
                        raise _Verdict(where, library.first_lines(e, 4)) from None
                    cases += 1
            if dev != traced_on:
                continue
            where = f"torch.compile(fullgraph=True) of square(sin(x)) on {dev}"
            try:
                torch._dynamo.reset()
                f = torch.compile(lambda t: ops["course::square"](t.sin()) * 2, fullgraph=True, backend="aot_eager")
                _check.assert_close(f(x), (x.sin() ** 2) * 2, name="compiled square(sin(x)) * 2")
            except Exception as e:
                raise _Verdict(where, library.first_lines(e, 4)) from None
            cases += 1
    return {"ok": True, "cases": cases}


def _main(argv: list[str]) -> int:
    args = json.loads(argv[0])
    try:
        result = _child(args)
    except _Verdict as v:
        result = {"ok": False, "where": v.where, "message": v.message, "why": v.why}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------------------
# Wrong answers. Each loads without ending a process where the right schemas are defined already (a test
# builds them in its own process); those that would end it (kernels swapped, a raw m.def) are proven rejected
# by tests/lessons/test_lesson04.py through check(answer_dir=...), which builds them in the child only.
# --------------------------------------------------------------------------------------------------

_DEF_SQUARE = '  define(m, "square(Tensor x) -> Tensor");\n'
_DEF_BACKWARD = '  define(m, "square_backward(Tensor grad_y, Tensor x) -> Tensor");\n'
_IMPL = "COURSE_IMPL_CPU_CUDA(m) {\n"
_IMPL_BACKWARD = '  m.impl("square_backward", &square_backward_kernel);\n'

WRONG = [
    Wrong(
        "x declared as written in place, Tensor(a!) x: the kernel returns a new tensor and leaves x alone",
        [(_DEF_SQUARE, '  define(m, "square(Tensor(a!) x) -> Tensor");\n')],
        "cpu",
    ),
    Wrong(
        "square_backward's schema misses x: the kernel takes (grad_y, x)",
        [(_DEF_BACKWARD, '  define(m, "square_backward(Tensor grad_y) -> Tensor");\n')],
        "cpu",
    ),
    Wrong(
        "square returns two tensors, (Tensor, Tensor): the kernel returns one",
        [(_DEF_SQUARE, '  define(m, "square(Tensor x) -> (Tensor, Tensor)");\n')],
        "cpu",
    ),
    Wrong(
        "the arguments named (input) and (grad, input), not the exercise's (x) and (grad_y, x)",
        [
            (_DEF_SQUARE, '  define(m, "square(Tensor input) -> Tensor");\n'),
            (_DEF_BACKWARD, '  define(m, "square_backward(Tensor grad, Tensor input) -> Tensor");\n'),
        ],
        "cpu",
    ),
    Wrong(
        "square_backward's kernel forgotten: the schema is there, no m.impl for it",
        [(_IMPL_BACKWARD, "")],
        "cpu",
    ),
    Wrong(
        "a raw TORCH_LIBRARY(course, m) block (define() inside): the namespace's one TORCH_LIBRARY, so loading an "
        "edited build again ends the process",
        [("COURSE_LIBRARY(m) {\n", "TORCH_LIBRARY(course, m) {\n")],
        "cpu",
    ),
    Wrong(
        "the kernels registered for CPU tensors only (TORCH_LIBRARY_IMPL(course, CPU, m)): CUDA tensors find none",
        [(_IMPL, "TORCH_LIBRARY_IMPL(course, CPU, m) {\n")],
        "cuda",
    ),
]

# Wrong answers that end the process that loads them where course::square is defined already (so a test
# cannot build them in its own process): check(answer_dir=...) builds them in its child only.
ENDS_THE_PROCESS = [
    Wrong(
        'the kernels swapped: m.impl("square", &square_backward_kernel) and the other way round',
        [
            ('  m.impl("square", &square_kernel);\n', '  m.impl("square", &square_backward_kernel);\n'),
            (_IMPL_BACKWARD, '  m.impl("square_backward", &square_kernel);\n'),
        ],
        "cpu",
    ),
    Wrong(
        "raw m.def inside COURSE_LIBRARY: a second load of the build defines the schemas twice",
        [
            (_DEF_SQUARE, '  m.def("square(Tensor x) -> Tensor");\n'),
            (_DEF_BACKWARD, '  m.def("square_backward(Tensor grad_y, Tensor x) -> Tensor");\n'),
        ],
        "cpu",
    ),
]


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
