"""Self-check for lesson 06's first exercise: kernels/exercises/wheel_square.py, the setup.py entry of your own op,
`square`. What a user of your wheel meets, in order:

1. your entry, called as setup.py calls it (kernels/, the exercise files, cuda, the course's flags);
2. the wheel: `pip wheel` of the course folder with your entry as the only extension (setup.py's COURSE_ENTRY), a
   CPU-only one in CPU mode and one for this GPU's architecture in CUDA mode; a compile error is reported with
   its first line;
3. installed into an empty folder, and used from a new Python process that sees only that folder: `import
   course_ops` loads your module, torch.ops.course.square exists, computes x * x (and its gradient 2 * x *
   grad) on fixed and random inputs, non-contiguous ones too, and passes torch.library.opcheck.

The op is built from your exercise files (kernels/exercises/: lessons 02 and 04 wrote its glue, registration,
fake kernels and autograd formulas): this exercise ships *your* op. If some are still stubs, the check says
which; check(course_answers=True) builds your entry with the course's answers instead (so does COURSE_SOLUTIONS=1,
and so do the tests' wrong answers, to test only the entry). The first build compiles the op's glue (a minute
on 2 cores); a second one, or one with a file more or less, recompiles only what changed."""

from __future__ import annotations

import importlib.util
import json
import pickle
import re
import tempfile
from pathlib import Path

import torch

from .. import env, selfcheck, wheel
from . import EXERCISES, SOLUTIONS, Wrong, python_module

OP = "square"
NAME = "wheel_square"
FILE = "kernels/exercises/wheel_square.py"
HINT = (
    "setup.py's extension_for builds the course's ops the same way (wheel.show_setup('extension_for')); the "
    "module's name says where it lands in the wheel; Path.glob on the op's folder finds every translation unit "
    'without naming one; the compiler looks for `#include "x"` only in the folders you list. See ' + FILE
)

# The fresh process: argv = seed, "cuda" or "cpu". Prints one JSON line: how far it got, and the error if any.
_FRESH = r"""
import json, sys
seed, where = int(sys.argv[1]), sys.argv[2]
out = {"stage": "import course_ops"}
try:
    import torch
    import course_ops
    out["ops"] = course_ops.OPS
    out["library"] = getattr(course_ops.extensions.get("square"), "__file__", None)
    out["stage"] = "torch.ops.course.square"
    op = torch.ops.course.square
    g = torch.Generator().manual_seed(seed)
    devices = ["cpu"] + (["cuda"] if where == "cuda" else [])
    sizes = [1, 3, 257, 1151, int(torch.randint(2, 5000, (1,), generator=g))]
    checked = 0
    for device in devices:
        out["stage"] = f"values on {device}"
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            for n in sizes:
                x = (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(dtype=dtype, device=device)
                want = (x.double() * x.double()).to(dtype)
                torch.testing.assert_close(op(x), want, msg=lambda m: f"square({n} {dtype}): {m}")
                checked += 1
        base = torch.randn(12, 34, generator=g, dtype=torch.float64).to(device)
        x = base[:, 1::3]  # not contiguous, not at the start of its storage
        torch.testing.assert_close(op(x), x * x, msg=lambda m: f"square of a non-contiguous view: {m}")
        out["stage"] = f"the gradient on {device}"
        x = base.clone().requires_grad_()
        grad = torch.randn(12, 34, generator=g, dtype=torch.float64).to(device)
        grad[::2] = 0  # zero gradients too
        op(x).backward(grad)
        torch.testing.assert_close(x.grad, 2 * x.detach() * grad, msg=lambda m: f"d square(x) / dx: {m}")
        out["stage"] = f"torch.library.opcheck on {device}"
        samples = [torch.randn(7, 129, generator=g).to(device), base[:, 1::3].float(), torch.randn(0).to(device)]
        samples.append(torch.randn(5, 9, generator=g, dtype=torch.float64).to(device).requires_grad_())
        fast = ("test_schema", "test_autograd_registration", "test_faketensor")
        for x in samples:  # the traced-and-compiled test (most of opcheck's time) on the sample that needs grad
            tests = (*fast, "test_aot_dispatch_dynamic") if x.requires_grad else fast
            torch.library.opcheck(torch.ops.course.square.default, (x,), test_utils=tests)
            checked += 1
    out.update(stage="done", checked=checked)
except BaseException as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""

# A compiler's error line (g++ "file:line:col: error:", nvcc "file(line): error:"), as pip shows it (indented).
_COMPILE_ERROR = re.compile(r"^\s*(\S[^:\n]*:\d+:(?:\d+:)? (?:fatal )?error: .*|\S[^(\n]*\(\d+\): error: .*)$", re.M)

# What an import error in the fresh process usually means, for the verdict.
_IMPORT_ERRORS = [
    ("undefined symbol", "the module calls a function that none of its compiled files defines: a file is missing"),
    ("module export function", "the file that defines the module's Python entry point is not among its sources"),
    ("holds no built op", "there is no extension module inside the package course_ops"),
    ("course::square", "torch.ops.course.square is not registered: the file that registers it is not compiled in"),
    (
        "no attribute 'square'",
        "torch.ops.course.square is not registered: the file that registers it is not compiled in",
    ),
]


def _setup_module():
    """setup.py as a module (its functions; building happens only under __main__), for compile_args."""
    spec = importlib.util.spec_from_file_location("course_setup", env.REPO_ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stubs(headers: Path, python_side: list[str]) -> list[str]:
    """The exercise files the op is built from (the headers kernels/square/ includes, and its Python side) that are
    still the generated stubs."""
    used = set(python_side)
    for source in (env.KERNELS / OP).iterdir():
        for name in re.findall(r'#include\s+"([^"]+)"', source.read_text(errors="replace")):
            if (SOLUTIONS / name).is_file():
                used.add(name)
    return sorted(f for f in used if (headers / f).is_file() and "TODO(exercise)" in (headers / f).read_text())


def check(device=None, ext=None, seed=None, course_answers: bool = False) -> int:
    """Your entry (kernels/exercises/wheel_square.py, or `ext`, a module with extension()) built into a wheel,
    installed and used in a fresh process. device: "cpu" builds a CPU-only wheel, "cuda" one for this GPU (which
    the fresh process runs on the CPU and the GPU); default: as the machine is. course_answers: build with the
    course's answers to the other exercises (kernels/solutions/) instead of yours."""
    seed = selfcheck.new_seed(seed)
    mod = ext or python_module(NAME)
    answers = ext is not None or course_answers or env.solutions_enabled()
    headers = SOLUTIONS if answers else EXERCISES
    cuda = (torch.device(device).type == "cuda") if device is not None else env.cuda_mode()
    cases = 0

    def fail(where: str, message: str, hint: str = HINT) -> None:
        selfcheck.fail(NAME, where, message, hint=hint, seed=seed)

    with selfcheck.exercise(NAME), tempfile.TemporaryDirectory(prefix="course-06-wheel-") as tmp:
        tmp = Path(tmp)
        flags = _setup_module().compile_args(cuda, debug=False)
        try:
            extension = mod.extension(env.KERNELS, headers, cuda, flags)
        except NotImplementedError:
            fail("your entry", f"extension() in {FILE} is not written yet")
        except Exception as e:  # whatever it raises is a verdict, not a crash
            fail("your entry", f"extension() raised {type(e).__name__}: {e}")
        from setuptools import Extension

        if not isinstance(extension, Extension):
            fail("your entry", f"extension() should return a CppExtension or CUDAExtension, got {extension!r}")
        python_side = list(getattr(mod, "PYTHON_SIDE", []))
        stubs = _stubs(headers, python_side)
        if stubs:
            fail(
                "your op's files",
                f"the wheel ships your op, built from your exercise files, and these are still the stubs: "
                f"{', '.join(stubs)} (kernels/exercises/). Finish them in their lessons, or check your entry with the "
                f"course's answers in their place: wheel_square.check(course_answers=True)",
                hint="",
            )
        # setup.py calls your extension() itself (COURSE_ENTRY); here it gets the very object your call returned.
        shim = tmp / "entry.py"
        shim.write_text(
            "import pickle\n"
            f"PYTHON_SIDE = {python_side!r}\n"
            f"def extension(kernels, headers, cuda, flags):\n    return pickle.loads({pickle.dumps(extension)!r})\n"
        )
        archs = "{}.{}".format(*torch.cuda.get_device_capability()) if cuda else None
        print(f"building the wheel with your entry ({'CUDA ' + archs if cuda else 'CPU only'}) ...", flush=True)
        try:
            built = wheel.build(tmp / "dist", entry=shim, headers=headers, cuda=cuda, archs=archs)
        except wheel.WheelError as e:
            first = _COMPILE_ERROR.search(e.output)
            if first:
                line = first.group(1).strip().replace(f"{env.REPO_ROOT}/", "")
                fail("building the wheel", f"the compiler stopped at\n  {line}")
            lines = [line for line in e.output.splitlines() if "rror" in line][:3] or str(e).splitlines()[-3:]
            fail("building the wheel", "pip wheel failed:\n  " + "\n  ".join(line.strip() for line in lines))
        site = wheel.install(built.path, tmp / "site")
        modules = sorted(str(p.relative_to(site)) for p in site.rglob("*.so"))
        report = json.loads(wheel.run_fresh(site, _FRESH, seed, "cuda" if cuda else "cpu").strip().splitlines()[-1])
        if "error" in report:
            error = "\n  ".join(report["error"].strip().splitlines()[:4])
            means = next((f"\nThat is: {why}." for key, why in _IMPORT_ERRORS if key in report["error"]), "")
            fail(
                f"a fresh process with only the wheel ({report['stage']})",
                f"{error}{means}\nThe wheel's extension modules: {', '.join(modules) or 'none'}",
            )
        if not Path(report["library"]).resolve().is_relative_to(site.resolve()):
            fail("the fresh process", f"it loaded {report['library']}, not the wheel's module in {site}")
        cases += report["checked"]
    what = "your op, with your exercise files" if not answers else "your entry, with the course's answers"
    selfcheck.passed_now(
        NAME,
        f"{built.path.name} ({built.seconds:.0f} s to build) holds {what}: in a fresh process torch.ops.course.square "
        f"gives x * x and its gradient and passes opcheck ({cases} cases)",
    )
    return cases


_SOURCES = '    sources = sorted(str(p) for pattern in patterns for p in (kernels / "square").glob(pattern))\n'

WRONG = [
    Wrong(
        "only the glue, square.cpp: the kernels and the registration are in the folder's other files, so the module "
        "fails on import (undefined symbol) or registers no op",
        [(_SOURCES, '    sources = [str(kernels / "square" / "square.cpp")]\n')],
        "cpu",
    ),
    Wrong(
        "the sources named by hand as square.cpp and square.cu: every other part of the folder is left out",
        [
            (
                _SOURCES,
                '    sources = [str(kernels / "square" / name) for name in ("square.cpp", "square.cu")[: 1 + cuda]]\n',
            )
        ],
        "cpu",
    ),
    Wrong(
        "the exercise files' folder left off the include path: the parts that include them do not compile",
        [("        include_dirs=[str(headers), str(kernels)],\n", "        include_dirs=[str(kernels)],\n")],
        "cpu",
    ),
    Wrong(
        "kernels/ left off the include path: common/checks.h and the other course headers are not found",
        [("        include_dirs=[str(headers), str(kernels)],\n", "        include_dirs=[str(headers)],\n")],
        "cpu",
    ),
    Wrong(
        "the module named square: it lands at the top of site-packages, outside course_ops, which loads nothing",
        [('        name="course_ops.square",\n', '        name="square",\n')],
        "cpu",
    ),
    Wrong(
        "no WITH_CUDA in a CUDA wheel: the glue is compiled without its kernel launches, so CUDA tensors are refused",
        [('        define_macros=[("WITH_CUDA", None)] if cuda else [],\n', "        define_macros=[],\n")],
        "cuda",
    ),
    Wrong(
        "no .cu file in a CUDA wheel: the glue calls launchers that nothing defines (undefined symbol on import)",
        [('    patterns = ["*.cpp", "*.cu"] if cuda else ["*.cpp"]\n', '    patterns = ["*.cpp"]\n')],
        "cuda",
    ),
]
