"""setup.py: the course's finished ops as an installable package, `course_ops`, built ahead of time from the same
sources in kernels/ that the notebooks compile at run time (lesson 06). No source is copied: each op becomes one
extension module, course_ops.NAME, made of the files helpers.loader.sources_for(NAME) names (every .cpp and .cu
in kernels/NAME/), with the exercise solutions on the include path.

    pip wheel --no-build-isolation --no-deps -w dist .       a wheel for this torch (and its CUDA, if any)
    pip install --no-build-isolation -e .                    an editable install, for developing

What the environment changes (read once, here):
    USE_CUDA=0                  a CPU-only wheel (CppExtension, no nvcc): runs on machines without CUDA
    TORCH_CUDA_ARCH_LIST        e.g. "9.0" or "7.5;8.0;9.0+PTX": the GPU architectures compiled in (torch's
                                BuildExtension turns it into -gencode flags); default: the GPUs of this machine,
                                or every architecture torch supports when it has none
    DEBUG=1                     -O0 -g for the C++ and -G for the device code (slow kernels: lesson 06 measures it)
    COURSE_OPS=polynomial,...   build only these ops (default: every op of kernels/ registered with torch.library
                                that has a Python module in helpers/ops/)
    COURSE_WHEEL_BUILD=DIR      where objects are compiled (default: a folder of the course's build cache per
                                configuration, so a second build of an unchanged op only relinks and zips)
    COURSE_ENTRY=FILE           build one op from FILE's setup.py entry instead, `extension(kernels, headers, cuda,
                                flags)` (lesson 06's exercise: your own op), with the Python files its PYTHON_SIDE
                                names shipped as course_ops.registrations
    COURSE_HEADERS=DIR          with COURSE_ENTRY: the exercise files the op is built with (default kernels/exercises:
                                yours; kernels/solutions: the course's answers)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from helpers import env  # noqa: E402  (the course's helpers: where the toolkit and the sources are)
from helpers.loader import op_names, sources_for, toolchain  # noqa: E402

KERNELS = env.KERNELS


def _flag(name: str, default: str) -> bool:
    return os.environ.get(name, default).lower() in ("1", "true", "yes", "on")


def packaged_ops() -> list[str]:
    """Every op registered with torch.library (its kernels/OP/OP.cpp opens a COURSE_LIBRARY block) that has a
    Python module in helpers/ops/ (its fake kernels and autocast rules), or the ops COURSE_OPS names."""
    chosen = [n.strip() for n in os.environ.get("COURSE_OPS", "").split(",") if n.strip()]
    found = [
        name
        for name in op_names()
        if (KERNELS / name / f"{name}.cpp").is_file()
        and "COURSE_LIBRARY(" in (KERNELS / name / f"{name}.cpp").read_text(errors="replace")
        and (ROOT / "helpers" / "ops" / f"{name}.py").exists()
    ]
    for name in chosen:
        if name not in found:
            raise SystemExit(f"COURSE_OPS names {name!r}, which is not one of the packaged ops: {', '.join(found)}")
    return chosen or found


def include_dirs() -> list[Path]:
    """The exercise solutions first (a wheel ships the course's answers, never a learner's stub), then kernels/."""
    return [KERNELS / "solutions", KERNELS]


def extension_sources(name: str, cuda: bool) -> list[Path]:
    """The files of op `name`: what the notebooks' loader compiles, less the .cu files in a CPU-only build."""
    return [s for s in sources_for(name) if cuda or s.suffix != ".cu"]


def _rel(p: Path) -> str:
    return os.path.relpath(p, ROOT)  # setuptools wants paths relative to setup.py


def compile_args(cuda: bool, debug: bool) -> dict[str, list[str]]:
    """The course's compiler flags, as an Extension's extra_compile_args: for the host compiler ("cxx") and, in a
    CUDA build, for nvcc."""
    cxx = ["-O0", "-g"] if debug else ["-O3", "-g0"]  # -g0: no debug info (Python's own flags add -g)
    # The loader's nvcc flags: -lineinfo (source lines for profilers, no run-time cost) unless DEBUG=1, which
    # makes device code unoptimized (-G) so that cuda-gdb can step through it.
    nvcc = ["-O0", "-g", "-G"] if debug else ["-O3", "-lineinfo"]
    return {"cxx": cxx, "nvcc": [*nvcc, "--expt-relaxed-constexpr"]} if cuda else {"cxx": cxx}


def extension_for(name: str, cuda: bool, debug: bool):
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    headers = sorted(p for ext in ("h", "cuh") for p in KERNELS.rglob(f"*.{ext}") if p.parent.name != "exercises")
    kind = CUDAExtension if cuda else CppExtension
    return kind(
        name=f"course_ops.{name}",
        sources=[_rel(s) for s in extension_sources(name, cuda)],
        include_dirs=[str(d) for d in include_dirs()],
        depends=[_rel(h) for h in headers],  # an edited header rebuilds the op (setuptools compares times)
        define_macros=[("WITH_CUDA", None)] if cuda else [],
        extra_compile_args=compile_args(cuda, debug),
        extra_link_args=toolchain.shared_cxx_runtime(),  # never a private copy of the C++ runtime per module
    )


def entry() -> tuple[object, Path] | None:
    """COURSE_ENTRY's module (a learner's setup.py entry, lesson 06) and the folder of exercise files it builds
    with, or None for the course's own ops."""
    if not os.environ.get("COURSE_ENTRY"):
        return None
    import importlib.util

    path = Path(os.environ["COURSE_ENTRY"]).resolve()
    spec = importlib.util.spec_from_file_location("course_entry", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    headers = Path(os.environ.get("COURSE_HEADERS") or KERNELS / "exercises").resolve()
    return module, headers


def entry_extension(module, headers: Path, cuda: bool, debug: bool):
    """The learner's entry, with its sources made relative to setup.py (setuptools wants them so)."""
    ext = module.extension(KERNELS, headers, cuda, compile_args(cuda, debug))
    ext.sources = [_rel(Path(s).resolve()) for s in ext.sources]
    ext.extra_link_args = [*ext.extra_link_args, *toolchain.shared_cxx_runtime()]  # as extension_for's
    return ext


def build_py_class(files: list[Path]):
    """setuptools' build_py, which also stages `files` (an entry op's Python side: lesson 04's fake kernels and
    autograd formulas) as the package course_ops.registrations; importing course_ops registers each one."""
    from setuptools.command.build_py import build_py

    class BuildCoursePy(build_py):
        def run(self):
            super().run()
            if files:
                staged = Path(self.build_lib) / "course_ops" / "registrations"
                staged.mkdir(parents=True, exist_ok=True)
                for f in files:
                    shutil.copyfile(f, staged / f.name)

    return BuildCoursePy


def build_ext_class():
    """torch's BuildExtension, with one change: an object file keeps its source's suffix (kernels/OP/OP.cpp.o beside
    kernels/OP/OP.cu.o). setuptools drops it, so an op's OP.cpp and OP.cu would both compile to OP.o, and ninja
    refuses ("multiple rules generate OP.o")."""
    from torch.utils.cpp_extension import BuildExtension

    class BuildCourseExtension(BuildExtension):
        def build_extensions(self):
            compiler = self.compiler

            def object_filenames(sources, strip_dir=False, output_dir=""):
                names = [os.path.basename(s) if strip_dir else os.path.normpath(s).lstrip(os.sep) for s in sources]
                return [os.path.join(output_dir or "", n + compiler.obj_extension) for n in names]

            compiler.object_filenames = object_filenames
            super().build_extensions()

    return BuildCourseExtension.with_options(use_ninja=True)


def build_config() -> dict:
    """What this build is: the ops, CUDA or not, the architectures, debug or not, and the torch it is for."""
    import torch

    cuda = _flag("USE_CUDA", "1") and torch.version.cuda is not None
    if cuda:
        kit = env.find_toolkit(torch.version.cuda)
        problem = env.toolkit_problem(kit, torch.version.cuda)
        if kit is None or (problem and "minor" not in problem):
            raise SystemExit(f"cannot build the CUDA wheel: {problem}\n(USE_CUDA=0 builds a CPU-only wheel)")
        os.environ["CUDA_HOME"] = str(kit.root)  # the toolkit that matches torch, not cpp_extension's own guess
        from torch.utils import cpp_extension

        cpp_extension.CUDA_HOME = str(kit.root)  # it read the variable when first imported
    chosen = entry()
    config = {
        "ops": ["(COURSE_ENTRY)"] if chosen else packaged_ops(),
        "cuda": cuda,
        "archs": os.environ.get("TORCH_CUDA_ARCH_LIST", "") if cuda else "",
        "debug": _flag("DEBUG", "0"),
        "torch": torch.__version__,
    }
    if chosen:
        config["headers"] = str(chosen[1])
    return config


def build_dir(config: dict) -> Path:
    if os.environ.get("COURSE_WHEEL_BUILD"):
        return Path(os.environ["COURSE_WHEEL_BUILD"]).resolve()
    key = hashlib.sha256(repr(sorted(config.items())).encode() + str(KERNELS).encode()).hexdigest()[:12]
    return env.cache_root() / "wheel" / key


def main() -> None:
    config = build_config()
    chosen = entry()
    if chosen:
        module, headers = chosen
        ext_modules = [entry_extension(module, headers, config["cuda"], config["debug"])]
        python_side = [headers / f for f in getattr(module, "PYTHON_SIDE", [])]
        # Entries that compile alike share a build folder whatever their sources and name: a second build of an
        # entry, or of one with a file more or less, recompiles only what changed.
        ext = ext_modules[0]
        config["compile"] = repr((ext.include_dirs, ext.define_macros, ext.extra_compile_args))
    else:
        ext_modules = [extension_for(n, config["cuda"], config["debug"]) for n in config["ops"]]
        python_side = []
    build = build_dir(config)
    print(f"course_ops: {config} (objects in {build})", flush=True)
    for staged in build.glob("lib*"):  # what the last build staged for the wheel: a file since removed stays out
        shutil.rmtree(staged, ignore_errors=True)
    setup(
        # One package: the ops' Python side (helpers/ops: fake kernels, autocast rules) ships as course_ops.ops.
        packages=["course_ops", "course_ops.ops"],
        package_dir={"course_ops.ops": "helpers/ops"},
        ext_modules=ext_modules,
        cmdclass={"build_ext": build_ext_class(), "build_py": build_py_class(python_side)},
        options={"build": {"build_base": str(build)}, "egg_info": {"egg_base": str(build)}},
    )


if __name__ == "__main__":
    main()
