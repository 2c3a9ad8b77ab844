"""Build and load the course's kernels from ``kernels/``, fast enough to edit-and-rerun in a notebook.

    op = loader.load("polynomial")          # every .cpp and .cu in kernels/polynomial/

Why not ``torch.utils.cpp_extension.load``? It works (lesson 01 shows it), but any edit renames the
module and recompiles every file, including the binding that parses all of torch's headers: 20-60 s
per edit. This loader keeps the design that makes edits cheap:

* every object file is cached under a hash of its compile command and the content of the source and of
  the course headers it includes, so an edited ``.cu`` (which includes no torch headers) is the only file
  recompiled: about a second of nvcc, then a link;
* torch's headers are parsed once per machine, not once per op: the first build precompiles them
  (``PCH_HEADER``, g++ only) into ``<cache>/pch/<key>/``, keyed by compiler, flags, torch and Python
  version, beside its own compiles (which go without it); every later ``.cpp`` that includes torch
  headers is compiled with ``-include`` of it
  (``-Winvalid-pch`` says so when a PCH cannot be used; on by default with 4 or more cores, COURSE_PCH=1/0
  forces it on/off). There are two: with pybind11 (``PCH_BINDING``) for the file that binds the Python
  module, without it for the others. Each takes about 0.5 GB of disk, for CPU builds and again for CUDA
  builds. The glue compiles at -O1 (``GLUE_OPT``), a large op's glue is split into files compiled in
  parallel (``sources_for``), and nvcc splits a ``.cu``'s device optimization across threads
  (``_split_compile``): a further op's first build is then ~9 s on a 16-core H100 host, against
  ~20 s without these three;
* every linked module is cached under the hash of its objects, so re-running a cell or restarting the
  kernel is an import (well under a second), and undoing an edit finds the old module again;
* outputs are written to a temporary name and renamed, so an interrupted build leaves nothing half
  written; a lock held by a process that no longer exists is removed with a note;
* compile errors are shown as ``kernels/OP/file.cu:LINE`` with the offending line, and the module loaded
  before stays usable (the failing ``load`` raises; your variable keeps the old module).

The package's parts: this module (which files an op is made of, the build, the import, ``show``),
``toolchain`` (flags, hashing, the precompiled torch headers) and ``process`` (readable errors, locks,
atomic writes, progress).

Exercises: ``kernels/exercises/`` (your files) comes first on the include path, or ``kernels/solutions/``
when COURSE_SOLUTIONS=1 (``env.bootstrap(solutions=True)``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib.machinery
import importlib.util
import os
import shlex
import time
from pathlib import Path

from .. import env as _env
from . import toolchain
from .process import BuildError, _atomic, _Lock, _Progress, _rel, _run, format_errors  # noqa: F401 (API)
from .toolchain import (  # noqa: F401 (the names tests, benchmarks and helpers.library use)
    _PCH_NOT_USED,
    _binds_python,
    _compiler_id,
    _cpp_command,
    _cxx,
    _digest,
    _ensure_pch,
    _fast_linker,
    _includes_torch,
    _link,
    _local_deps,
    _nvcc_command,
    _pch_enabled,
    _pch_header,
    _pch_possible,
    _pch_text,
    _require_toolkit,
    _torch_flags,
    _torch_paths,
    default_archs,
)

KERNELS = _env.KERNELS
_modules: dict[str, object] = {}  # .so path -> module, so an unchanged build returns the same object
_registered: dict[str, str] = {}  # op name -> the .so whose torch.library kernels are registered now


@dataclasses.dataclass
class Build:
    name: str
    path: Path
    seconds: float
    compiled: list[str]  # sources compiled this time (empty: everything came from the cache)
    linked: bool
    pch: Path | None = None  # the precompiled torch header the (first) glue file was compiled with (None: none)
    pch_built: bool = False  # True when this build precompiled them (the first build on this machine)
    link_seconds: float = 0.0  # of `seconds`, the link (0 when the module came from the cache)
    tu_seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # each compiled source's wall time


last_build: Build | None = None


def _include_dirs(extra: list[Path]) -> list[Path]:
    """`include_dirs` first (a test puts a wrong answer there), then the exercises (or solutions), then kernels/."""
    exercise_dir = KERNELS / ("solutions" if _env.solutions_enabled() else "exercises")
    return [*extra, exercise_dir, KERNELS]


# --------------------------------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------------------------------


def sources_for(name: str) -> list[Path]:
    """An op's translation units: every .cpp and .cu in its folder, kernels/NAME/. NAME.cpp is the PyTorch glue
    (checks, dtype dispatch, the binding), NAME.cu the kernels and launchers; parts NAME.PART.cpp/.cu without
    torch headers compile an exercise (NAME.exercises.*) or architecture-specific kernels, and parts with
    torch headers (NAME.autograd.cpp, NAME.cpu.cpp) split a large glue so that its pieces compile in parallel.
    Editing a file recompiles only that file."""
    folder = KERNELS / name
    found = sorted(p for ext in ("cpp", "cu") for p in folder.glob(f"*.{ext}")) if folder.is_dir() else []
    if not found:
        ops = ", ".join(op_names()) or "none"
        raise FileNotFoundError(f"no kernels/{name}/ with .cpp or .cu sources (the ops: {ops})")
    main = [p for p in (folder / f"{name}.cpp", folder / f"{name}.cu") if p in found]
    return main + [p for p in found if p not in main]


def op_names() -> list[str]:
    """The ops under kernels/: every folder with a .cpp or .cu source (not common/, exercises/, solutions/)."""
    if not KERNELS.is_dir():
        return []
    return sorted(d.name for d in KERNELS.iterdir() if d.is_dir() and (any(d.glob("*.cpp")) or any(d.glob("*.cu"))))


def _unity_enabled() -> bool:
    """Whether an op's torch glue files compile as one file: by default with fewer than 4 cores, where the
    parts (NAME.cpp, NAME.autograd.cpp, ...) would not compile side by side but would each parse torch's
    headers (no PCH there either): on a 2-core machine fused_bias_relu's first build takes 20.5 s split and
    14.7 s as one file. COURSE_UNITY=1/0 forces it on/off."""
    choice = os.environ.get("COURSE_UNITY", "").lower()
    if choice in ("0", "false", "no", "1", "true", "yes"):
        return choice in ("1", "true", "yes")
    return (os.cpu_count() or 1) < 4


def _glue_exercise(deps: list[Path]) -> bool:
    """Whether a file with these dependencies (itself first) is a glue exercise's own file (kernels/OP/OP.NAME.cpp):
    torch's headers and an exercise header. (A kernel exercise's header is compiled by torch-free files.)"""
    solutions = KERNELS / "solutions"
    exercises = {f.name for f in solutions.iterdir()} if solutions.is_dir() else set()
    return _includes_torch(deps) and any(d.name in exercises for d in deps[1:])


def _unify(name: str, cpp: list[Path], includes: list[Path], build_dir: Path) -> list[Path]:
    """`cpp`, with its files that include torch headers replaced by one generated file that includes them all
    (a "unity build") where _unity_enabled() and there are several; the torch-free ones (an exercise's) and
    a glue exercise's own file stay apart, so an exercise edit still recompiles only them."""
    torch_files = []
    for s in cpp:
        deps = _local_deps(s.resolve(), includes)
        # A glue exercise's file (kernels/OP/OP.NAME.cpp that includes the learner's header) compiles alone,
        # so that the learner's edit recompiles that small file, not the whole glue.
        if _includes_torch(deps) and not _glue_exercise(deps):
            torch_files.append(s)
    if len(torch_files) < 2 or not _unity_enabled():
        return cpp
    unity = build_dir / "unity" / ("+".join(s.stem for s in torch_files) + ".cpp")
    text = f"// {name}'s glue as one file (helpers/loader.py, _unify): fewer than 4 cores\n"
    text += "".join(f'#include "{s.resolve()}"\n' for s in torch_files)
    if not unity.is_file() or unity.read_text() != text:
        unity.parent.mkdir(parents=True, exist_ok=True)
        _atomic(unity, lambda tmp: tmp.write_text(text))
    return [unity] + [s for s in cpp if s not in torch_files]


def load(
    name: str,
    sources: list[str | Path] | None = None,
    *,
    cuda: bool | None = None,
    archs: list[str] | None = None,
    extra_cflags: list[str] = (),
    extra_cuda_cflags: list[str] = (),
    include_dirs: list[str | Path] = (),
    debug: bool | None = None,
    verbose: bool = False,
    pch: bool | None = None,
):
    """Build (or fetch from the cache) and import the extension `name`.

    sources: files in kernels/ (default: sources_for(NAME)). `.cu` files are compiled
        only when building for CUDA; the `.cpp` then sees -DWITH_CUDA.
    cuda: build the CUDA parts (default: when a GPU is in use). CI sets it with no GPU to compile-check.
    archs: e.g. ["7.5", "9.0"] (default: this GPU's architecture only, for the fastest build).
    debug: -O0 -g (and -G for device code); default from the environment variable DEBUG=1.
    include_dirs: searched before kernels/exercises/ (or solutions/) and kernels/.
    pch: compile every file with torch headers against the precompiled ones (True), or none (False); default
        where _pch_enabled() (4 or more cores), and for a glue exercise's file. A folder whose glue the learner
        writes and edits (lesson 08's op) passes True: each edit of it then recompiles in seconds, not a minute.
    """
    global last_build
    t0 = time.time()
    if debug is None:
        debug = os.environ.get("DEBUG", "0") == "1"
    if cuda is None:
        cuda = _env.cuda_mode()
    srcs = [Path(s) if Path(s).is_absolute() else KERNELS / s for s in sources] if sources else sources_for(name)
    for s in srcs:
        if not s.is_file():
            raise FileNotFoundError(f"source {s} does not exist")
    cu = [s for s in srcs if s.suffix == ".cu"]
    cpp = [s for s in srcs if s.suffix != ".cu"]
    includes = _include_dirs([Path(p).resolve() for p in include_dirs])
    archs = archs or (default_archs() if cuda else [])

    jobs = []  # (source, command, object path)
    build_dir = _env.cache_root() / name
    (build_dir / "obj").mkdir(parents=True, exist_ok=True)
    cpp = _unify(name, cpp, includes, build_dir)
    torch_flags = _torch_flags(cuda, list(extra_cflags), debug) if cpp else []
    # The precompiled torch headers: one for files that bind a Python module, one for those that do not. Every
    # file with torch headers uses them where _pch_enabled(); elsewhere (fewer than 4 cores) a glue exercise's
    # file still does, since it is what the learner recompiles after each edit (square.glue.cpp on 2 cores:
    # about 51 s without, 14 s with; the precompile costs about a minute once per machine).
    pch_all = bool(cpp) and (_pch_enabled() if pch is None else (pch and _pch_possible()))
    glue = {s for s in cpp if _glue_exercise(_local_deps(s.resolve(), includes))}
    pchs = {b: _pch_header(torch_flags, b) for b in (False, True)} if pch_all or (glue and _pch_possible()) else {}
    use_pch = {b: ["-Winvalid-pch", "-include", str(h)] for b, h in pchs.items()}
    for group, (cmd, ident) in (
        (cpp, _cpp_command(name, cuda, includes, list(extra_cflags), debug)),
        (
            cu if cuda else [],
            _nvcc_command(archs, includes, list(extra_cuda_cflags), debug) if cuda and cu else ([], ""),
        ),
    ):
        for s in group:
            deps = _local_deps(s.resolve(), includes)
            precompiled = pchs and s.suffix != ".cu" and _includes_torch(deps) and (pch_all or s in glue)
            c = [*cmd, *use_pch[_binds_python(deps)]] if precompiled else cmd
            # The include folders are left out of the key: the course headers they resolved to (path and
            # content) are in it. So the torch glue, which includes no exercise header, is one object for the
            # stubs, the solutions and every wrong answer a test builds.
            key_cmd = [a for a in c if not a.startswith("-I")]
            h = _digest(ident, shlex.join(key_cmd), *[f"{d}\n".encode() + d.read_bytes() for d in deps])
            jobs.append((s, c, build_dir / "obj" / f"{s.stem}.{h}.o"))

    import torch

    torch_lib, *more_libs = _torch_paths(cuda)[1]
    link = [
        _cxx(),
        "-shared",
        *toolchain._fast_linker(),
        *[f"-L{p}" for p in (torch_lib, *more_libs)],
        f"-Wl,-rpath,{torch_lib}",
        "-lc10",
        "-ltorch",
        "-ltorch_cpu",
        "-ltorch_python",
        *toolchain.shared_cxx_runtime(),
    ]
    if cuda:
        kit = _require_toolkit()
        cudart = kit.cudart()
        link += ["-lc10_cuda", "-ltorch_cuda"] + ([str(cudart), f"-Wl,-rpath,{cudart.parent}"] if cudart else [])
    # Which linker links it (lld, gold, or ld after a fallback) does not change the module: out of the key.
    key_link = [a for a in link if not a.startswith("-fuse-ld=")]
    so = build_dir / f"{name}.{_digest(torch.__version__, shlex.join(key_link), *[j[2].name for j in jobs])}.so"

    todo = [j for j in jobs if not j[2].exists()]
    linked = pch_built = False
    link_seconds = 0.0
    tu_seconds: dict[str, float] = {}
    if todo or not so.exists():
        with _Lock(build_dir / "lock"):
            todo = [j for j in jobs if not j[2].exists()]  # another process may have built them meanwhile
            pch_job, pch_states = None, []
            missing = {b: h for b, h in pchs.items() if not h.with_name(h.name + ".gch").exists()}
            if missing and any(_pch_of(c) in missing.values() for _, c, _ in todo):
                # No PCH yet (the first op on this machine): precompile both beside this op's compiles, which go
                # without one, into the same object files (the same code: the headers only include torch's).
                todo = [(s, c[:-3] if _pch_of(c) in missing.values() else c, o) for s, c, o in todo]
                pch_job = concurrent.futures.ThreadPoolExecutor(len(missing))
                pch_states = [pch_job.submit(_ensure_pch, h, torch_flags, _pch_text(b)) for b, h in missing.items()]
            if todo or not so.exists():
                what = ", ".join(s.name for s, _, _ in todo) or "link only"
                arch_note = (
                    f" for sm_{'/'.join(a.replace('.', '') for a in archs)}"
                    if cuda and any(s.suffix == ".cu" for s, _, _ in todo)
                    else ""
                )
                also = " and torch's headers (once per machine: later ops compile faster)" if pch_job else ""
                with _Progress(f"Building {name}: {what}{arch_note}{also}"):
                    try:
                        tu_seconds = _compile_all(todo, verbose)
                        if not so.exists():
                            objs = [str(j[2]) for j in jobs]
                            t_link = time.time()
                            _atomic(so, lambda tmp: _link(link, objs, tmp))
                            linked, link_seconds = True, time.time() - t_link
                    finally:
                        if pch_job:
                            pch_built = any(state.result() == "built" for state in pch_states)
                            pch_job.shutdown()
    module = _import(name, so)
    with_pch = next((_pch_of(c) for _, c, _ in todo or jobs if _pch_of(c)), None)
    compiled = [s.name for s, _, _ in todo]
    last_build = Build(name, so, time.time() - t0, compiled, linked, with_pch, pch_built, link_seconds, tu_seconds)
    if verbose:
        print(f"{name}: {so} ({last_build.seconds:.2f} s, compiled {last_build.compiled or 'nothing'})")
    return module


def _pch_of(cmd: list[str]) -> Path | None:
    """The precompiled header a compile command uses (None: none)."""
    return Path(cmd[-1]) if len(cmd) >= 3 and cmd[-3] == "-Winvalid-pch" else None


def _compile_all(todo, verbose: bool) -> dict[str, float]:
    """Compile `todo` in parallel (one thread per core); returns each source's wall-clock seconds."""
    seconds: dict[str, float] = {}

    def one(job):
        src, cmd, obj = job
        t = time.time()
        full = lambda tmp: [*cmd, "-c", str(src), "-o", str(tmp)]  # noqa: E731
        if verbose:
            print("\n$ " + shlex.join(full(obj)))
        out = []
        _atomic(obj, lambda tmp: out.append(_run(full(tmp), f"compiling {_rel(str(src))}")))
        for line in _PCH_NOT_USED.findall("".join(out))[:1]:  # -Winvalid-pch: say so, the build still works
            print(f"\nnote: {src.name} was compiled without the precompiled torch header: {line.strip()}")
        seconds[src.name] = time.time() - t

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(todo), os.cpu_count() or 1))) as pool:
        futures = [pool.submit(one, j) for j in todo]
        errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        msg = "\n\n".join(str(e) for e in errors)
        raise BuildError(
            msg + "\n(the module loaded before, if any, is still the one in use)",
            "\n".join(getattr(e, "log", "") for e in errors),
        )
    return seconds


def _import(name: str, so: Path):
    """Import the module in `so`. Its spec name is unique per build (`_course_<hash>.NAME`): pybind11 3
    caches modules by spec name, so a rebuilt module imported under the plain name would silently be
    the old one. Python finds PyInit_NAME from the last component, which the binding defines.

    The op's torch.library kernels (kernels/common/library.h) are registered when a build is first opened, and the
    last registered wins. So when a build opened before comes back (an edit undone: the cache has it), its
    kernels are registered again by opening a copy of it (the dynamic linker runs a file's registrations
    once per path): torch.ops.course.* always runs the build `load` returned last."""
    key = str(so)
    if key in _modules and _registered.get(name, key) != key:
        _reregister(so)
    _registered[name] = key
    if key not in _modules:
        import torch  # noqa: F401  (the extension links against torch's libraries)

        spec_name = f"_course_{so.stem.split('.')[-1]}.{name}"
        loader = importlib.machinery.ExtensionFileLoader(spec_name, key)
        spec = importlib.util.spec_from_file_location(spec_name, key, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        _modules[key] = module
    return _modules[key]


def _reregister(so: Path) -> None:
    """Open a copy of `so` so that its static torch.library registrations run again (see _import). The copy
    is removed once open: the process keeps its mapping, and the cache keeps nothing."""
    import ctypes
    import shutil

    global _reopened
    _reopened += 1
    copy = so.with_name(f".{so.name}.{os.getpid()}.{_reopened}.again.so")
    try:
        shutil.copyfile(so, copy)
        ctypes.CDLL(str(copy))
    finally:
        copy.unlink(missing_ok=True)


_reopened = 0


# --------------------------------------------------------------------------------------------------
# For the notebooks: show a kernel's source, and find torch's own stale build locks
# --------------------------------------------------------------------------------------------------


def show(file: str | Path, name: str, *, with_comment: bool = True, through: str | None = None) -> None:
    """Print the definition of `name` in kernels/`file` (from its first line to its closing brace),
    with the comment block just above it, and the line numbers, so notebooks show the real source.
    `name` is matched in code only (a comment that mentions it is skipped), so pass the text that starts
    the definition: "PYBIND11_MODULE(", "forward_v2_kernel(". through="..." prints on to the end of the
    first definition after it that contains that text: a template and its specializations in one block."""
    path = Path(file) if Path(file).is_absolute() else KERNELS / file
    lines = path.read_text().splitlines()

    def code_has(i: int, text: str) -> bool:
        line = lines[i]
        return text in line.split("//")[0] and not line.lstrip().startswith(("*", "/*"))

    start = next((i for i in range(len(lines)) if code_has(i, name)), None)
    if start is None:
        raise ValueError(f"{name!r} not found in the code of {_rel(str(path))}")
    last = start
    if through is not None:
        last = next((i for i in range(start, len(lines)) if code_has(i, through)), None)
        if last is None:
            raise ValueError(f"{through!r} not found in the code of {_rel(str(path))} after {name!r}")
    first = start
    while (
        with_comment and first > 0 and lines[first - 1].strip() and not lines[first - 1].rstrip().endswith(("}", ";"))
    ):
        first -= 1  # the comment, template line and attributes above it, up to a blank line
    depth, end, opened = 0, last, False
    for end in range(last, len(lines)):
        depth += lines[end].count("{") - lines[end].count("}")
        opened = opened or "{" in lines[end]
        if (opened and depth <= 0) or (not opened and lines[end].rstrip().endswith(";")):
            break  # the closing brace, or a declaration without a body (a `using`, a prototype)
    print(f"// {_rel(str(path))}, lines {first + 1}-{end + 1}")
    for i in range(first, end + 1):
        print(f"{i + 1:4d}  {lines[i]}")


def build_times(name: str = "hello") -> dict[str, Build]:
    """Lesson 00's experiment: op `name` built three ways in a scratch cache (yours is not touched), each
    a `Build` (seconds, files compiled): "cold" (nothing cached but torch's precompiled headers, shared
    with your cache), "edited" (one source changed by a comment: the .cu with a GPU, else the .cpp) and
    "cached" (nothing changed: an import)."""
    import shutil
    import tempfile

    srcs = sources_for(name)
    cuda = _env.cuda_mode()
    target = next((s for s in srcs if s.suffix == (".cu" if cuda else ".cpp")), srcs[0])
    real = _env.cache_root()
    old = os.environ.get("COURSE_CACHE")
    with tempfile.TemporaryDirectory(prefix="course-build-times-") as tmp:
        (real / "pch").mkdir(parents=True, exist_ok=True)
        Path(tmp, "pch").symlink_to(real / "pch", target_is_directory=True)
        edited = Path(tmp, "src", target.name)
        edited.parent.mkdir()
        shutil.copy(target, edited)
        for header in (p for p in target.parent.iterdir() if p.suffix in (".h", ".cuh")):
            shutil.copy(header, edited.parent)  # its own folder's headers, found beside it as in kernels/NAME/
        with open(edited, "a") as f:
            f.write("\n// an edit: a comment changes the file's hash, so it is compiled again\n")
        os.environ["COURSE_CACHE"] = tmp
        try:
            out = {}
            for label, sources in (
                ("cold", srcs),
                ("edited", [edited if s == target else s for s in srcs]),
                ("cached", srcs),
            ):
                load(name, sources)
                out[label] = last_build
        finally:
            if old is None:
                os.environ.pop("COURSE_CACHE", None)
            else:
                os.environ["COURSE_CACHE"] = old
    return out


def torch_locks(max_age_s: float = 0) -> list[tuple[Path, float]]:
    """Lock files in torch's JIT build folders (torch.utils.cpp_extension.load/load_inline), with their
    age in seconds. torch waits forever on a lock left by a killed build: if no build is running,
    delete the file (or call remove_torch_lock(path))."""
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    locks = [*root.glob("*/lock"), *root.glob("*/*/lock")] if root.exists() else []
    ages = [(lock, time.time() - lock.stat().st_mtime) for lock in locks]
    return [(lock, age) for lock, age in ages if age >= max_age_s]


def remove_torch_lock(path: str | Path) -> None:
    Path(path).unlink(missing_ok=True)
    print(f"removed {path}")
