"""Lesson 06's tools: build the course's ops into a wheel with setup.py, install it into a fresh folder, and run
it in a fresh Python process that cannot see this course folder (so what runs is what the wheel holds).

    w = wheel.build(out, ops=["polynomial"], cuda=False)      # pip wheel --no-build-isolation: a Wheel
    w = wheel.build(out, entry=FILE, headers=DIR, cuda=False) # one op from a learner's setup.py entry
    site = wheel.install(w.path, target)                      # pip install --target: a fresh folder
    report = wheel.check_installed(site)                      # a new process: import, run, opcheck

Each step runs pip or python as a subprocess, as you would in a terminal; a failure raises WheelError with the
command and the end of its output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .env import REPO_ROOT, cache_root


class WheelError(RuntimeError):
    output = ""  # the failed command's whole output (the message holds its last lines)

    def _render_traceback_(self):  # IPython: the message, not a traceback through subprocess
        return [f"\x1b[31mWheelError\x1b[0m: {self}"]


@dataclasses.dataclass
class Wheel:
    path: Path
    seconds: float  # the whole `pip wheel`: compile, link, zip
    ops: list[str]
    cuda: bool
    archs: str  # TORCH_CUDA_ARCH_LIST ("" when not CUDA)
    debug: bool

    @property
    def mb(self) -> float:
        return self.path.stat().st_size / 1e6

    def __str__(self) -> str:
        what = f"CUDA {self.archs or 'this GPU'}" if self.cuda else "CPU only"
        return (
            f"{self.path.name}: {', '.join(self.ops) or 'every packaged op'}, {what}{', DEBUG' if self.debug else ''}: "
            f"{self.mb:.1f} MB, built in {self.seconds:.1f} s"
        )


def _run(cmd: list[str], what: str, env: dict | None = None, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        error = WheelError(f"{what} failed (exit {proc.returncode}):\n$ {' '.join(map(str, cmd))}\n{tail}")
        error.output = proc.stdout + proc.stderr
        raise error
    return proc.stdout


def build(
    out: str | Path,
    *,
    ops: list[str] | None = None,
    cuda: bool = True,
    archs: str | None = None,
    debug: bool = False,
    build_dir: str | Path | None = None,
    entry: str | Path | None = None,
    headers: str | Path | None = None,
) -> Wheel:
    """`pip wheel --no-build-isolation --no-deps -w OUT .` in the course folder, with setup.py's switches set:
    COURSE_OPS (default: every packaged op), USE_CUDA, TORCH_CUDA_ARCH_LIST (default: this machine's GPU),
    DEBUG. build_dir: where objects are compiled (default: a folder of the build cache per configuration,
    reused by the next build of the same configuration; pass a new folder to time a build from scratch).
    entry: a file whose extension(kernels, headers, cuda, flags) is the one op to build (COURSE_ENTRY: lesson 06's
    exercise), with the exercise files of `headers` (default kernels/exercises)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, USE_CUDA="1" if cuda else "0", DEBUG="1" if debug else "0")
    env.pop("COURSE_SOLUTIONS", None)  # a wheel always ships the solutions (setup.py's include path)
    for var, value in (("COURSE_OPS", ",".join(ops or [])), ("TORCH_CUDA_ARCH_LIST", archs or "")):
        env.pop(var, None)
        if value:
            env[var] = value
    if build_dir is not None:
        env["COURSE_WHEEL_BUILD"] = str(build_dir)
    for var, value in (("COURSE_ENTRY", entry), ("COURSE_HEADERS", headers)):
        env.pop(var, None)
        if value is not None:
            env[var] = str(Path(value).resolve())
    before = set(out.glob("*.whl"))
    for old in before:  # pip keeps a wheel of the same name: remove it, so the one returned is this build's
        if old.name.startswith("course_ops-"):
            old.unlink()
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(out), "."]
    # Builds in the build cache's shared folders wait for each other (two notebooks, or two test processes,
    # compiling into one folder at once would overwrite each other's objects); a build folder of its own does not.
    from .loader.process import _Lock

    shared = build_dir is None
    if shared:
        (cache_root() / "wheel").mkdir(parents=True, exist_ok=True)
    with _Lock(cache_root() / "wheel" / "lock", timeout=1800) if shared else contextlib.nullcontext():
        t0 = time.perf_counter()  # the time of the build, not of the wait
        _run(cmd, "building the wheel", env=env, cwd=REPO_ROOT)
    seconds = time.perf_counter() - t0
    made = sorted(out.glob("course_ops-*.whl"), key=lambda p: p.stat().st_mtime)
    if not made:
        raise WheelError(f"pip wheel succeeded but left no course_ops wheel in {out}")
    return Wheel(made[-1], seconds, ops or ([Path(entry).stem] if entry else []), cuda, archs or "", debug)


def install(wheel: str | Path, target: str | Path) -> Path:
    """`pip install --no-deps --no-index --target TARGET WHEEL`: a folder holding only the wheel's files (torch
    comes from the environment, as it would for a user). Returns the folder."""
    target = Path(target)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--upgrade", "--target"]
    _run([*cmd, str(target), str(wheel)], "installing the wheel")
    return target


# The program check_installed runs in a new process. It imports course_ops from the installed folder (its
# Python side too, course_ops.ops: the course folder is not on sys.path when they are imported), then borrows only the
# sample inputs of the course's tests (tests/op_samples.py) to run each packaged op against plain PyTorch and
# through torch.library.opcheck (its traced-and-compiled test on each op's first sample: the tests/ops suite runs
# it on them all), on the CPU and on the GPU if there is one.
_CHECK = r"""
import importlib, json, sys, time
t0 = time.perf_counter()
import torch
t_torch = time.perf_counter() - t0
t0 = time.perf_counter()
import course_ops
t_import = time.perf_counter() - t0
sys.path.append(sys.argv[1])  # the course folder, for tests/op_samples.py only: the ops are the wheel's
import pkgutil, types
# op_samples imports helpers.ops.*: here those names are the wheel's course_ops.ops.* (one registration each)
sys.modules["helpers"] = types.ModuleType("helpers")
sys.modules["helpers.ops"] = sys.modules["helpers"].ops = course_ops.ops
for info in pkgutil.iter_modules(course_ops.ops.__path__):
    sys.modules[f"helpers.ops.{info.name}"] = importlib.import_module(f"course_ops.ops.{info.name}")
from tests import op_samples
devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
checked = []
for name, op in op_samples.LIBRARY_OPS.items():
    if op.module not in course_ops.OPS:
        continue
    for device in devices:
        fast = ("test_schema", "test_autograd_registration", "test_faketensor")
        samples = op_samples.library_samples(name, device, requires_grad=bool(op.differentiable))
        for i, args in enumerate(samples):  # the traced-and-compiled test (most of the time) on the first only
            torch.library.opcheck(op.overload(), args, test_utils=(*fast, "test_aot_dispatch_dynamic") if i == 0 else fast)
        if op.public is not None:
            for args in op_samples.library_samples(name, device):
                torch.testing.assert_close(op.public(*args), op.native(*args), msg=lambda m: f"{name}: {m}")
        checked.append(f"{name} ({device})")
print(json.dumps({
    "course_ops": course_ops.__file__, "ops_package": course_ops.ops.__file__, "ops": course_ops.OPS,
    "libraries": {n: m.__file__ for n, m in course_ops.extensions.items()},
    "import_torch_s": t_torch, "import_course_ops_s": t_import, "checked": checked,
}))
"""


def _fresh_env(site: Path, hide_gpu: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    for var in ("COURSE_SOLUTIONS", "COURSE_KERNELS"):
        env.pop(var, None)
    if hide_gpu:  # what a machine without a GPU sees (torch's CUDA build still loads, with no device)
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def check_installed(site: str | Path, *, hide_gpu: bool = False) -> dict:
    """In a new Python process with `site` first on sys.path (started in an empty folder, so the course
    folder is not visible): import course_ops, then opcheck every packaged op and compare it with plain
    PyTorch. Returns what the process reports: where course_ops and course_ops.ops were loaded from, the import times,
    and the ops and devices checked. Raises WheelError when the process fails."""
    site = Path(site).resolve()
    env = _fresh_env(site, hide_gpu)
    with tempfile.TemporaryDirectory(prefix="course-fresh-") as cwd:
        out = _run([sys.executable, "-c", _CHECK, str(REPO_ROOT)], "the fresh process", env=env, cwd=Path(cwd))
    report = json.loads(out.strip().splitlines()[-1])
    for what in ("course_ops", "ops_package", *report["libraries"].values()):
        path = report.get(what, what)
        if not Path(path).resolve().is_relative_to(site):
            raise WheelError(f"the fresh process loaded {path}, not the installed copy in {site}")
    return report


def run_fresh(site: str | Path, program: str, *args: str, hide_gpu: bool = False) -> str:
    """`python -c PROGRAM ARGS...` in a new process with `site` first on sys.path, started in an empty folder (the
    course folder is not visible). Returns its standard output; raises WheelError when it fails."""
    site = Path(site).resolve()
    with tempfile.TemporaryDirectory(prefix="course-fresh-") as cwd:
        cmd = [sys.executable, "-c", program, *map(str, args)]
        return _run(cmd, "the fresh process", env=_fresh_env(site, hide_gpu), cwd=Path(cwd))


@contextlib.contextmanager
def aoti_compiler():
    """Around torch._inductor.aoti_compile_and_package: where the C++ compiler AOTInductor uses links libstdc++
    into shared libraries statically (helpers.loader.toolchain.links_cxx_runtime_statically), it gets that
    compiler with the shared runtime named on its link line, as the loader's builds have
    (toolchain.shared_cxx_runtime says why a private copy of the C++ runtime in a module is a problem).
    Anywhere else it changes nothing."""
    import torch._inductor.config as inductor_config
    from torch._inductor import cpp_builder

    from .loader import toolchain

    cxx = cpp_builder.get_cpp_compiler()
    if not toolchain.links_cxx_runtime_statically(cxx):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="course-cxx-") as d:
        shim = Path(d) / "g++"  # AOTInductor tells compilers apart by name: keep g++'s
        real, runtime = shlex.quote(cxx), " ".join(toolchain.shared_cxx_runtime(cxx))
        # the runtime goes on links only (-shared): beside -c or a header's compile, g++ would link
        shim.write_text(
            f'#!/bin/sh\ncase " $* " in *" -shared "*) exec {real} "$@" {runtime};; esac\nexec {real} "$@"\n'
        )
        shim.chmod(0o755)
        with inductor_config.patch({"cpp.cxx": (None, str(shim))}):
            yield


_RUN_AOTI = r"""
import faulthandler, sys
faulthandler.enable()  # a crash prints the Python line it happened under
import torch
if sys.argv[3] == "course_ops":
    import course_ops  # the package calls course::polynomial through the dispatcher: register it first
print("phase: loading the package", flush=True)
runner = torch._inductor.aoti_load_package(sys.argv[1])
print("phase: running it", flush=True)
torch.save(runner(torch.load(sys.argv[2])), sys.argv[2] + ".aoti")
print("ran it", flush=True)
"""


@dataclasses.dataclass
class AotiRun:
    ok: bool  # the fresh process ran the package and saved its output beside the input (INPUT.aoti)
    summary: str  # one line: "ran it", or how it failed


def run_aoti(site: str | Path, package: str | Path, inputs: str | Path, control=None) -> AotiRun:
    """Load an AOTInductor package and run it on the tensor saved at `inputs`, in a new process that imports
    course_ops from `site` first. A process that dies by a signal (the runtime crashed) is reported, not
    raised: where `control` is given (a function returning the path of a package of a model without the
    course's ops), that package is run the same way, so the summary says whether the crash comes with the
    custom op or with AOTInductor's runtime on this machine."""
    env = _fresh_env(Path(site).resolve(), hide_gpu=False)
    cmd = [sys.executable, "-c", _RUN_AOTI, str(package), str(inputs), "course_ops"]
    with tempfile.TemporaryDirectory(prefix="course-fresh-") as cwd:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
        if proc.returncode == 0:
            return AotiRun(True, "ran it")
        phases = [line for line in proc.stdout.splitlines() if line.startswith("phase: ")]
        during = phases[-1].removeprefix("phase: ") if phases else "starting"
        if proc.returncode > 0:  # a Python error: its last line says why
            last = (proc.stdout + proc.stderr).strip().splitlines()[-1]
            return AotiRun(False, f"failed while {during}: {last}")
        import signal

        why = f"crashed with {signal.Signals(-proc.returncode).name} while {during}"
        if control is not None:
            plain = [sys.executable, "-c", _RUN_AOTI, str(control()), str(inputs), "no"]
            again = subprocess.run(plain, capture_output=True, text=True, env=env, cwd=cwd)
            why += (
                "; a package of the same shapes without the course op runs in a fresh process, so the crash comes "
                "with the custom op's call"
                if again.returncode == 0
                else f"; a package without the course op fails the same way (exit {again.returncode}): "
                "AOTInductor's runtime crashes on this machine, whatever the model calls"
            )
        return AotiRun(False, why)


_TIME = r"""
import json, sys
import torch, course_ops
sys.path.append(sys.argv[2])  # the course folder, for helpers.bench only (the timer): the op is the wheel's
from helpers import bench
n = int(sys.argv[1])
g = torch.Generator(device="cuda").manual_seed(0)
x, grad_y = (torch.randn(n, device="cuda", generator=g) for _ in range(2))
coeffs = torch.tensor([1.5, 0.5, -2.0, 0.25], device="cuda")
ext = course_ops.extensions["polynomial"]
times = {
    "forward v1": bench.time(lambda: ext.forward(x, coeffs, 1)).ms,
    "forward v2": bench.time(lambda: torch.ops.course.polynomial(x, coeffs)).ms,
    "backward v2": bench.time(lambda: torch.ops.course.polynomial_backward(grad_y, x, coeffs, True)).ms,
}
print(json.dumps(times))
"""


def time_polynomial(site: str | Path, numel: int = 1 << 24) -> dict[str, float]:
    """On the GPU, in a new process importing course_ops from `site`: the median milliseconds of the installed
    polynomial's forward (v1: lesson 01's exercise kernel, v2: the course's) and backward on `numel` floats."""
    site = Path(site).resolve()
    with tempfile.TemporaryDirectory(prefix="course-fresh-") as cwd:
        cmd = [sys.executable, "-c", _TIME, str(numel), str(REPO_ROOT)]
        out = _run(cmd, "timing", env=_fresh_env(site, False), cwd=Path(cwd))
    return json.loads(out.strip().splitlines()[-1])


# What the course's C++ glue uses from torch (a pattern found in kernels/*/*.cpp and the headers they include), and
# the name its stable-ABI counterpart would have in torch's stable headers (torch/csrc/stable, torch/headeronly,
# the AOTI C shim), or None where the stable ABI has nothing under any name: then `term` is what is searched
# for, to show it is absent.
STABLE_ABI_USES = [
    ("schemas: TORCH_LIBRARY_FRAGMENT (COURSE_LIBRARY)", r"COURSE_LIBRARY\(", "STABLE_TORCH_LIBRARY_FRAGMENT"),
    ("CPU and CUDA kernels: TORCH_LIBRARY_IMPL", r"TORCH_LIBRARY_IMPL\(course, C(PU|UDA)", "STABLE_TORCH_LIBRARY_IMPL"),
    ("dtype dispatch: AT_DISPATCH_*", r"AT_DISPATCH", "THO_DISPATCH"),
    ("CPU threads: at::parallel_for", r"at::parallel_for", "parallel_for"),
    ("the current CUDA stream", r"getCurrentCUDAStream", "aoti_torch_get_current_cuda_stream"),
    ("device guard: c10::cuda::CUDAGuard", r"CUDAGuard", "DeviceGuard"),
    ("typed errors: TORCH_CHECK_TYPE / _VALUE", r"TORCH_CHECK_(TYPE|VALUE)", "TORCH_CHECK_VALUE"),
    ("C++ autograd: torch::autograd::Function", r"torch::autograd::Function", "autograd"),
    ("autocast kernels: at::autocast (AutocastCUDA)", r"at::autocast", "autocast"),
    ("the dispatcher: c10::Dispatcher (define(), op<>())", r"c10::Dispatcher", "Dispatcher"),
    ("pybind11 bindings (ext.forward, lessons 01-03)", r"PYBIND11_MODULE", "PYBIND11"),
]


def stable_abi_table() -> list[dict]:
    """For each thing the course's C++ glue uses (STABLE_ABI_USES): how many ops' glue files (kernels/NAME/NAME.cpp with
    its .cpp parts) use it, directly or through a course header, and where torch's stable ABI headers have its counterpart (None: nowhere)."""
    import re

    import torch

    from . import env, loader

    include = Path(torch.__file__).parent / "include" / "torch"
    stable = [
        *(include / "csrc" / "stable").rglob("*.h"),
        *(include / "headeronly").rglob("*.h"),
        include / "csrc" / "inductor" / "aoti_torch" / "c" / "shim.h",
    ]
    stable_text = {p: p.read_text(errors="replace") for p in stable if p.is_file()}
    texts = {  # an op's glue: its .cpp files (NAME.cpp, NAME.autograd.cpp, ...), with the headers they include
        name: "".join(
            d.read_text(errors="replace")
            for part in loader.sources_for(name)
            if part.suffix == ".cpp"
            for d in loader._local_deps(part, [env.KERNELS / "solutions", env.KERNELS])
        )
        for name in loader.op_names()
    }
    rows = []
    for what, pattern, term in STABLE_ABI_USES:
        users = [name for name, text in texts.items() if re.search(pattern, text)]
        hits = sorted(str(p.relative_to(include.parent)) for p, text in stable_text.items() if term in text)
        rows.append({"uses": what, "files": len(users), "stable ABI": hits[0] if hits else None})
    return rows


def show_setup(name: str) -> None:
    """Print the function `name` of setup.py with its line numbers (the source, not a copy of it)."""
    import ast

    path = REPO_ROOT / "setup.py"
    text = path.read_text()
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines()
    print(f"# setup.py, lines {node.lineno}-{node.end_lineno}")
    for i in range(node.lineno - 1, node.end_lineno):
        print(f"{i + 1:4d}  {lines[i]}")
