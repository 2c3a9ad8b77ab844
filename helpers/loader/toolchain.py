"""How one source is compiled: the toolkit, g++ and nvcc flags, the hash that keys a cached object, and the
precompiled torch headers every op's glue shares (helpers.loader builds with these)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from .. import env as _env
from .process import BuildError, _atomic, _Lock, _run

# --------------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------------


@functools.cache
def _compiler_id(cmd: str) -> str:
    try:
        out = subprocess.run([cmd, "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return "missing"
    return out.strip().splitlines()[0] if out.strip() else "unknown"


def _torch_paths(cuda: bool) -> tuple[list[Path], list[Path]]:
    """Include and library directories from torch.utils.cpp_extension (torch's, plus the toolkit's for CUDA)."""
    import logging

    import torch

    if not torch.cuda.is_available():  # "No CUDA runtime is found" on import: expected in CPU mode
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import cpp_extension

    device = "cpu"
    if cuda:
        cpp_extension.CUDA_HOME = str(_require_toolkit().root)  # the toolkit we build with, not its guess
        device = "cuda"
    incs = [Path(p) for p in cpp_extension.include_paths(device)]
    libs = [Path(p) for p in cpp_extension.library_paths(device)]
    return incs, libs


def _cxx() -> str:
    return os.environ.get("CXX", "c++")


# g++'s optimization of the .cpp glue. -O1 with the loop vectorizer, not -O3: the glue is mostly templates run
# once per call (the dispatcher, autograd, pybind11), where -O3's extra passes cost a further op's first build
# ~40 % more compile time (kernels/layernorm/layernorm.cpp's glue compiled as one file: 7.3 s instead of 12 s
# on a 2-core machine); the CPU kernels' loops stay vectorized. COURSE_GLUE_OPT="-O3" (space-separated flags)
# overrides it.
GLUE_OPT = os.environ.get("COURSE_GLUE_OPT", "-O1 -ftree-vectorize").split()


def _torch_flags(cuda: bool, extra: list[str], debug: bool) -> list[str]:
    """g++ flags for code that includes torch headers, without the op's name and the course's -I paths:
    the same for every op, so one precompiled header serves them all."""
    import torch

    system = [*_torch_paths(cuda)[0], Path(sysconfig.get_paths()["include"])]
    defines = ["-DTORCH_API_INCLUDE_EXTENSION_H"]
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    if abi is not None:
        defines.append(f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}")
    if cuda:
        defines.append("-DWITH_CUDA")
    opt = ["-O0", "-g"] if debug else GLUE_OPT
    cmd = [_cxx(), "-fPIC", "-std=c++17", *opt, *defines]
    return cmd + [x for p in system for x in ("-isystem", str(p))] + list(extra)


def _cpp_command(name: str, cuda: bool, includes: list[Path], extra: list[str], debug: bool):
    import torch

    flags = _torch_flags(cuda, extra, debug)
    cmd = [*flags[:1], f"-DTORCH_EXTENSION_NAME={name}", *flags[1:]] + [f"-I{p}" for p in includes]
    return cmd, f"{_compiler_id(_cxx())} torch {torch.__version__} py {sys.version_info[:2]}"


def _nvcc_command(archs: list[str], includes: list[Path], extra: list[str], debug: bool):
    kit = _require_toolkit()
    gencode = []
    for a in archs:
        num = a.replace(".", "")
        gencode += ["-gencode", f"arch=compute_{num},code=sm_{num}"]
    # nvcc's -O is the host code's level (the device code is optimized unless -G): -O1 makes the same
    # cubin and PTX as -O3 and halves the host compile of a .cu, the largest phase of a kernel edit's rebuild.
    opt = ["-O0", "-g", "-G"] if debug else ["-O1", "-lineinfo", *_split_compile(kit.version)]
    cmd = [str(kit.nvcc), "-std=c++17", *opt, "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr", *gencode]
    cmd += [f"-I{p}" for p in includes]
    return cmd + list(extra), f"nvcc {kit.version} {_compiler_id(_cxx())}"


def _split_compile(version: str) -> list[str]:
    """nvcc's -split-compile (CUDA 12+): the device code's optimizer (cicc) and ptxas work on parts of a .cu in
    parallel threads. With 4 or more cores: a large .cu (fused_bias_relu.cu, one kernel template in dozens of
    instantiations) is the longest job of a first build, and its device phases are most of it (cicc 2.5 s
    + ptxas 1.7 s of 7.0 s on the 2-core machine; 5.9 s with the split even there). The kernels' SASS is the
    same instructions, some laid out in another order. COURSE_SPLIT_COMPILE=0 turns it off."""
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if major < 12 or (os.cpu_count() or 1) < 4 or os.environ.get("COURSE_SPLIT_COMPILE") == "0":
        return []
    return ["-split-compile=0"]  # 0: as many threads as the machine has CPUs


@functools.cache
def _fast_linker() -> list[str]:
    """lld or gold when installed: they read torch's large libraries about twice as fast as GNU ld
    (0.7 s instead of 1.2 s a link on the 2-core machine)."""
    import shutil

    if "clang" in _compiler_id(_cxx()).lower() or os.environ.get("COURSE_FAST_LINKER") == "0":
        return []
    for name in ("lld", "gold"):
        if shutil.which(f"ld.{name}"):
            return [f"-fuse-ld={name}"]
    return []


@functools.cache
def shared_cxx_runtime(cxx: str | None = None) -> list[str]:
    """Link flags for `cxx` (default: the course's compiler) that name the shared C++ runtime (libstdc++.so.6)
    ahead of the libraries g++ adds itself.

    A g++ that links the C++ runtime statically puts a private copy of it into every module (seen on the GPU
    test machine: libstdc++'s own functions inside the course's modules, in the backtraces). Where that copy's
    locale meets the process's shared one, in the first number a module prints (torch's schema printing at
    import, an error message), the process crashes or fails with std::bad_cast. Named first, the shared
    runtime resolves every symbol, and the static archive that follows adds nothing. Linux and g++ only
    (clang links libc++ or its own way; macOS has no libstdc++)."""
    cxx = cxx or _cxx()
    if sys.platform != "linux" or "clang" in _compiler_id(cxx).lower():
        return []
    try:  # where the linker cannot find it (a g++ with its own sysroot), naming it would fail every link
        found = subprocess.run([cxx, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True).stdout
    except OSError:
        return []
    return ["-l:libstdc++.so.6"] if os.path.isabs(found.strip()) else []


@functools.cache
def links_cxx_runtime_statically(cxx: str | None = None) -> bool:
    """Whether `cxx` (default: the course's compiler) puts the C++ runtime into a shared library it links (a
    wrapper that passes -static-libstdc++, or a g++ that finds only libstdc++.a): it links a small library that
    prints a number, and reads whether the result needs libstdc++.so (readelf; False where that is missing)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="course-probe-") as d:
        src, lib = Path(d) / "probe.cpp", Path(d) / "probe.so"
        src.write_text(
            "#include <sstream>\nstd::string probe(long n) { std::ostringstream s; s << n; return s.str(); }\n"
        )
        try:
            built = subprocess.run([cxx or _cxx(), "-shared", "-fPIC", str(src), "-o", str(lib)], capture_output=True)
            if built.returncode != 0:
                return False
            needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
        except (OSError, subprocess.SubprocessError):
            return False
    return "libstdc++" not in needed


def _link(link: list[str], objs: list[str], out: Path) -> None:
    """Link; if lld/gold fails where GNU ld would not (gold cannot open the libstdc++.so linker script of a
    g++ installed under /opt, for one), link again with the default linker, and use
    that from then on."""
    fast = _fast_linker()
    try:
        _run([*link[:2], *objs, "-o", str(out), *link[2:]], "linking")
    except BuildError:
        if not fast or fast[0] not in link:
            raise
        getattr(_fast_linker, "cache_clear", lambda: None)()
        os.environ["COURSE_FAST_LINKER"] = "0"
        plain = [a for a in link if a not in fast]
        _run([*plain[:2], *objs, "-o", str(out), *plain[2:]], "linking")


def _require_toolkit() -> _env.Toolkit:
    import torch

    kit = _env.find_toolkit(torch.version.cuda)
    problem = _env.toolkit_problem(kit, torch.version.cuda)
    if kit is None or (problem and "minor" not in problem):
        raise BuildError(problem or "no CUDA toolkit found")
    return kit


def default_archs() -> list[str]:
    """The current GPU's architecture (fast builds), else $TORCH_CUDA_ARCH_LIST, else 7.5 8.0 9.0."""
    import torch

    if _env.cuda_mode():
        major, minor = torch.cuda.get_device_capability()
        return [f"{major}.{minor}"]
    listed = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if listed:
        return [a.replace("+PTX", "") for a in re.split(r"[;\s]+", listed.strip()) if a]
    return ["7.5", "8.0", "9.0"]


# --------------------------------------------------------------------------------------------------
# Hashing: a source's hash covers its command and every course header it includes
# --------------------------------------------------------------------------------------------------

_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _local_deps(src: Path, includes: list[Path]) -> list[Path]:
    seen: list[Path] = []
    todo = [src]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.append(f)
        for inc in _INCLUDE.findall(f.read_text(errors="replace")):
            for d in (f.parent, *includes):
                cand = (d / inc).resolve()
                if cand.is_file():
                    todo.append(cand)
                    break
    return seen


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# The precompiled torch header: parsed once per machine, shared by every op's .cpp glue
# --------------------------------------------------------------------------------------------------

# What the ops' .cpp glue includes (kernels/common/checks.h, library.h and the .cpp files). A glue file that includes
# less still compiles with it; one that includes more parses the rest as usual.
PCH_HEADER = """\
// torch_pch.h, written by helpers/loader.py: the torch headers the ops' .cpp glue includes, precompiled
// once (torch_pch.h.gch beside this file) and put in front of each glue file with -include.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/library.h>
#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif
"""
# What a file that binds a Python module (PYBIND11_MODULE) includes besides: the binding PCH is PCH_HEADER
# and this. Two PCHs, because pybind11's headers make every file that includes them emit ~100 kB of
# pybind11's inline functions: 1.7 s more per file on the 2-core machine (an empty file with the binding PCH
# 3.4 s, with the plain one 1.7 s), which an op's files without a binding (NAME.autograd.cpp) need not pay.
PCH_BINDING = "#include <torch/csrc/utils/pybind.h>\n"
# A file that includes torch's headers compiles in tens of seconds, one that does not in about one. c10's scalar
# types (c10/util/Half.h, BFloat16.h: a CPU loop over float16 and bfloat16) are light, and keep a file torch-free.
_TORCH_INCLUDE = re.compile(r"^\s*#\s*include\s*<(?:(?:torch|ATen|pybind11)/|c10/(?!util/(?:Half|BFloat16)\.h>))", re.M)
_BINDING_INCLUDE = re.compile(r"^\s*#\s*include\s*<(?:torch/csrc/utils/pybind\.h|torch/extension\.h|pybind11/)", re.M)
_PCH_NOT_USED = re.compile(r"^.*\.gch.*(?:not used because|not a PCH|Winvalid-pch).*$", re.M)


def _includes_torch(deps: list[Path]) -> bool:
    return any(_TORCH_INCLUDE.search(d.read_text(errors="replace")) for d in deps)


def _binds_python(deps: list[Path]) -> bool:
    return any(_BINDING_INCLUDE.search(d.read_text(errors="replace")) for d in deps)


def _pch_possible() -> bool:
    """g++ (clang reads a different format), and not turned off with COURSE_PCH=0."""
    if os.environ.get("COURSE_PCH", "").lower() in ("0", "false", "no"):
        return False
    ident = _compiler_id(_cxx()).lower()
    return ident not in ("missing", "unknown") and "clang" not in ident


def _pch_enabled() -> bool:
    """For every file with torch headers. By default only with 4 or more cores: building it costs about 30 CPU s
    beside the first op's compiles, which 16 cores absorb (a further op's first build 24 s with it, 39 s
    without, on a 16-core H100 host) but 2 cores do not (Colab's: the first op 43 s with it, 22 s without,
    later ops no faster). COURSE_PCH=1 or 0 forces it on or off. A glue exercise's file gets it wherever it is
    possible (see load): it is the file a learner recompiles again and again."""
    choice = os.environ.get("COURSE_PCH", "").lower()
    if not choice and (os.cpu_count() or 1) < 4:
        return False
    return _pch_possible()


def _pch_text(binding: bool) -> str:
    return PCH_HEADER + (PCH_BINDING if binding else "")


def _pch_header(flags: list[str], binding: bool = False) -> Path:
    """Where the precompiled header for these exact flags lives (nothing is built here): its key covers
    the compiler, the flags, torch and Python versions and the header's text, and it is part of the
    glue's compile command, so of its object's hash. binding: the one for files that bind a Python module."""
    import torch

    ident = f"{_compiler_id(_cxx())} torch {torch.__version__} py {sys.version_info[:3]}"
    key = _digest(ident, shlex.join(flags), _pch_text(binding))
    return _env.cache_root() / "pch" / key / "torch_pch.h"


def _pch_command(header: Path, flags: list[str], out: Path) -> list[str]:
    return [*flags, "-x", "c++-header", str(header), "-o", str(out)]


def _ensure_pch(header: Path, flags: list[str], text: str) -> str:
    """Build `header`.gch once (a lock, then an atomic rename, so concurrent builds wait and then reuse
    it): "built", "cached", or "failed" when it cannot be built (glue files then compile without it).
    Runs beside the first op's compiles, so it prints only a failure."""
    gch = header.with_name(header.name + ".gch")
    failed = header.with_name("FAILED.txt")
    if gch.exists():
        return "cached"
    if failed.exists():
        return "failed"
    header.parent.mkdir(parents=True, exist_ok=True)
    with _Lock(header.with_name("lock")):
        if gch.exists():
            return "cached"
        if failed.exists():
            return "failed"
        if not header.exists():
            _atomic(header, lambda tmp: tmp.write_text(text))
        try:
            _atomic(gch, lambda tmp: _run(_pch_command(header, flags, tmp), "precompiling torch's headers"))
        except BuildError as e:
            failed.write_text(f"{e}\n\n{e.log}")
            print(
                f"\nCould not precompile torch's headers ({failed}); compiling without. "
                f"Delete {header.parent} to try again.",
                flush=True,
            )
            return "failed"
    return "built"
