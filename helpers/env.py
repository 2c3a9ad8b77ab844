"""The machine a lesson runs on: GPU or CPU mode, torch, the CUDA toolkit, and what to do when they disagree.

Every notebook starts with ``env = helpers.env.bootstrap()``. It prints one report and returns an ``Env``;
later cells ask it ``env.device``, ``env.cuda`` or ``env.need_gpu("what")``.

The CUDA toolkit (nvcc and headers) must match the CUDA that torch was built with, or extensions fail with
errors that are hard to read. ``find_toolkit`` looks for one ($CUDA_HOME, nvcc on PATH, /usr/local/cuda,
NVIDIA's pip wheels in this environment) and ``ensure_toolkit`` installs the pip wheels when none matches:
``python -m helpers.env --ensure-nvcc`` (the Makefile's set-up runs it).

Colab: the published repository and release (PUBLISHED_REPO, PUBLISHED_REF) that the bootstrap cell clones and
every "Open in Colab" badge opens; ``python -m helpers.env --badges`` rewrites the badges from them.

Environment variables: COURSE_DEVICE=cpu (CPU mode on a GPU machine), COURSE_SOLUTIONS=1 (load the exercise
solutions), COURSE_CACHE (the build cache), COURSE_KERNELS (build from a copy of kernels/: the benchmarks
edit one), COURSE_PCH=1/0 (force the precompiled torch header on/off; by default on with 4+ cores; see helpers/loader.py).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# The kernel sources the loader builds. COURSE_KERNELS points it at a copy (benchmarks/loader_times.py
# edits a temporary copy so the tracked files are never touched); read once, at import.
KERNELS = Path(os.environ.get("COURSE_KERNELS") or REPO_ROOT / "kernels").resolve()


def in_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


# The published course: the GitHub repository and the release (a git tag) that every "Open in Colab" badge
# opens and that the bootstrap cell clones on Colab (its COURSE_GIT and COURSE_REF). Change them here, then
# run `python -m helpers.env --badges` to rewrite the badges; tests/infrastructure/test_colab.py checks that the badges in
# README.md and in every notebook, and every bootstrap cell, agree with these two lines.
# Not yet published: the repository name and the tag are the ones the course will be released
# under; until that release exists, the badges and the Colab clone cannot reach it (README says so), and a
# fork sets COURSE_GIT / COURSE_REF in the environment, or changes these two lines and reruns --badges.
PUBLISHED_REPO = "gpu-course/pytorch-cuda-kernels"
PUBLISHED_REF = "v0.1"
COLAB_BADGE_SVG = "https://colab.research.google.com/assets/colab-badge.svg"


def colab_url(notebook: str) -> str:
    """The address that opens notebooks/`notebook` of the published release in Colab."""
    return f"https://colab.research.google.com/github/{PUBLISHED_REPO}/blob/{PUBLISHED_REF}/notebooks/{notebook}"


def colab_badge(notebook: str) -> str:
    """The Markdown "Open in Colab" badge of notebooks/`notebook`."""
    return f"[![Open In Colab]({COLAB_BADGE_SVG})]({colab_url(notebook)})"


_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\(([^)]*)\)")


def write_badges(root: Path = REPO_ROOT) -> list[Path]:
    """Put colab_badge(name) in every notebook (the line after the title of its first markdown cell) and after
    each notebook's name in README.md's table of lessons, replacing any older badge. Returns the files changed.
    Notebooks are rewritten as `make strip` writes them; nothing else in them changes."""
    import json

    changed = []
    for nb_path in sorted((root / "notebooks").glob("[0-9]*.ipynb")):
        nb = json.loads(nb_path.read_text())
        cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
        text = "".join(cell["source"])
        badge = colab_badge(nb_path.name)
        if _BADGE.search(text):
            new = _BADGE.sub(lambda m: badge, text)  # noqa: B023
        else:
            title, _, rest = text.partition("\n")
            new = f"{title}\n\n{badge}\n" + (rest if rest.startswith("\n") else "\n" + rest)
        if new != text:
            cell["source"] = new.splitlines(keepends=True)
            nb_path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            changed.append(nb_path)
    readme = root / "README.md"
    text = readme.read_text()
    new = text
    for nb_path in sorted((root / "notebooks").glob("[0-9]*.ipynb")):
        row = re.compile(rf"(\| `{re.escape(nb_path.name)}`)(?: {_BADGE.pattern})? \|")
        new = row.sub(lambda m: f"{m.group(1)} {colab_badge(nb_path.name)} |", new)  # noqa: B023
    if new != text:
        readme.write_text(new)
        changed.append(readme)
    return changed


def child_environ() -> dict[str, str]:
    """This process's environment with the course folder first on PYTHONPATH: for a child process that imports
    helpers (a grader, a learner's tests) from wherever it starts."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path)


def solutions_enabled() -> bool:
    """True when notebooks should load exercise solutions instead of the learner's files."""
    return os.environ.get("COURSE_SOLUTIONS", "0").lower() in ("1", "true", "yes")


# --------------------------------------------------------------------------------------------------
# The CUDA toolkit
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Toolkit:
    root: Path  # what CUDA_HOME should be
    nvcc: Path
    version: str  # "13.0"

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib64" if (self.root / "lib64").is_dir() else self.root / "lib"

    def cudart(self) -> Path | None:
        """The shared CUDA runtime to link against (pip wheels ship only libcudart.so.N)."""
        hits = sorted(self.lib_dir.glob("libcudart.so*"), key=lambda p: len(p.name))
        return hits[0] if hits else None


@functools.cache
def nvcc_version(nvcc: str) -> str | None:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def _site_packages() -> list[Path]:
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path}
    return [Path(p) for p in paths if p and Path(p, "nvidia").is_dir()]


def _pip_toolkit_root(site: Path) -> Path | None:
    """NVIDIA's pip wheels: CUDA 13 puts everything in nvidia/cu13; CUDA 12 splits it into
    nvidia/cuda_nvcc, nvidia/cuda_runtime, ... which we merge into one tree of symlinks."""
    for cu13 in sorted(site.glob("nvidia/cu1[3-9]")):
        if (cu13 / "bin" / "nvcc").exists():
            return cu13
    nvcc_pkg = site / "nvidia" / "cuda_nvcc"
    if not (nvcc_pkg / "bin" / "nvcc").exists():
        return None
    farm = Path(cache_root(), "cuda-pip-toolkit")
    if (farm / ".complete").exists():
        return farm
    for pkg in sorted(site.glob("nvidia/*/")):
        for sub in ("bin", "include", "lib", "nvvm"):
            src = pkg / sub
            if not src.is_dir():
                continue
            for entry in src.iterdir():
                link = farm / ("lib64" if sub == "lib" else sub) / entry.name
                if not link.exists():
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(entry)
    (farm / ".complete").touch()
    return farm


def _candidates() -> list[Path]:
    roots: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    on_path = shutil.which("nvcc")
    if on_path:
        real = Path(on_path).resolve()
        roots.append(real.parent.parent)
        # a wrapper script such as `exec /usr/local/cuda-13.0/bin/nvcc "$@"`
        try:
            m = re.search(r"(/\S+)/bin/nvcc", real.read_text(errors="ignore")[:500])
            if m:
                roots.append(Path(m.group(1)))
        except OSError:
            pass
    roots += [Path("/usr/local/cuda"), *map(Path, sorted(glob.glob("/usr/local/cuda-*"), reverse=True))]
    for site in _site_packages():
        root = _pip_toolkit_root(site)
        if root:
            roots.append(root)
    seen, out = set(), []
    for r in roots:
        usable = (r / "bin" / "nvcc").exists() and (r / "include" / "cuda_runtime.h").exists()
        if usable and r.resolve() not in seen:
            seen.add(r.resolve())
            out.append(r)
    return out


@functools.cache
def find_toolkit(want: str | None = None) -> Toolkit | None:
    """The CUDA toolkit to build with: the first whose version is `want` (torch's CUDA, "13.0"),
    else the first with the same major version, else the first found at all."""
    kits = []
    for root in _candidates():
        v = nvcc_version(str(root / "bin" / "nvcc"))
        if v:
            kits.append(Toolkit(root, root / "bin" / "nvcc", v))
    if not kits:
        return None
    if want:
        for match in (lambda v: v == want, lambda v: v.split(".")[0] == want.split(".")[0]):
            for kit in kits:
                if match(kit.version):
                    return kit
    return kits[0]


def toolkit_problem(kit: Toolkit | None, torch_cuda: str | None) -> str | None:
    """A sentence saying why builds will fail or warn with this toolkit, or None when they will not."""
    if torch_cuda is None:
        return None  # a CPU build of torch: only CPU extensions, no nvcc needed
    if kit is None:
        return (
            f"no nvcc found, and torch was built with CUDA {torch_cuda}. CUDA kernels cannot be compiled. "
            f"Fix: `python -m helpers.env --ensure-nvcc` installs NVIDIA's nvcc {torch_cuda} from PyPI "
            "into this environment (about 100 MB), or set CUDA_HOME to a CUDA toolkit."
        )
    if kit.version.split(".")[0] != torch_cuda.split(".")[0]:
        return (
            f"nvcc {kit.version} ({kit.root}) does not match torch's CUDA {torch_cuda}: torch refuses to build "
            f"extensions across CUDA major versions. Fix: `python -m helpers.env --ensure-nvcc` installs nvcc "
            f"{torch_cuda} from PyPI, or install a torch built for CUDA {kit.version}."
        )
    if kit.version != torch_cuda:
        return (
            f"nvcc {kit.version} and torch's CUDA {torch_cuda} differ in the minor version: builds work, "
            "but torch prints a warning; `python -m helpers.env --ensure-nvcc` installs the exact match."
        )
    return None


def ensure_toolkit(quiet: bool = False) -> Toolkit | None:
    """Install nvcc matching torch.version.cuda from PyPI when no such toolkit is on the machine."""
    import torch

    want = torch.version.cuda
    if want is None:
        if not quiet:
            print("torch is a CPU build: no CUDA toolkit needed.")
        return None
    kit = find_toolkit(want)
    if kit and kit.version == want:
        if not quiet:
            print(f"nvcc {kit.version} at {kit.root} matches torch's CUDA {want}.")
        return kit
    major = want.split(".")[0]
    if int(major) >= 13:
        # torch's own wheel depends on the `cuda-toolkit` meta-package; ask for its compiler extras
        # at the same version so everything lands in one nvidia/cu13 tree.
        from importlib import metadata

        try:
            pin = "==" + metadata.version("cuda-toolkit")
        except metadata.PackageNotFoundError:
            pin = f"=={want}.*"
        pkgs = [f"cuda-toolkit[nvcc,crt,nvvm,cccl,cudart]{pin}"]
    else:
        pkgs = [f"nvidia-{p}-cu{major}=={want}.*" for p in ("cuda-nvcc", "cuda-runtime", "cuda-cccl")]
    print(
        f"No nvcc {want} found ({kit.version + ' at ' + str(kit.root) if kit else 'none at all'}); "
        f"installing {' '.join(pkgs)} from PyPI ...",
        flush=True,
    )
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *pkgs], check=True)
    find_toolkit.cache_clear()
    kit = find_toolkit(want)
    if kit is None or kit.version.split(".")[0] != major:
        raise RuntimeError(f"installed {pkgs} but still found no nvcc {want}; set CUDA_HOME by hand")
    print(f"nvcc {kit.version} installed at {kit.root}")
    return kit


# --------------------------------------------------------------------------------------------------
# The report every notebook starts with
# --------------------------------------------------------------------------------------------------


def cache_root() -> Path:
    """Where the course's builds are cached (override with COURSE_CACHE)."""
    base = os.environ.get("COURSE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuda-course"
    )
    return Path(base)


@dataclasses.dataclass
class Env:
    mode: str  # "cuda" or "cpu"
    torch: str
    torch_cuda: str | None
    gpu: str | None
    capability: tuple[int, int] | None
    toolkit: Toolkit | None
    problems: list[str]
    solutions: bool

    @property
    def cuda(self) -> bool:
        return self.mode == "cuda"

    @property
    def device(self):
        import torch

        return torch.device("cuda" if self.cuda else "cpu")

    @property
    def can_build_cuda(self) -> bool:
        return (
            self.cuda and self.toolkit is not None and not any("cannot" in p or "refuses" in p for p in self.problems)
        )

    def need_gpu(self, what: str) -> bool:
        """Use as `if env.need_gpu("timing the CUDA kernel"): ...`; prints why a cell part is skipped."""
        if self.cuda:
            return True
        print(f"[CPU mode] skipped: {what} needs a CUDA GPU.")
        return False


def cuda_mode() -> bool:
    """True when lessons run their CUDA paths: a GPU is usable and COURSE_DEVICE=cpu is not set."""
    import torch

    if os.environ.get("COURSE_DEVICE", "").lower() == "cpu":
        return False
    return torch.cuda.is_available()


def default_device(device=None):
    """`device` as a torch.device, or the one lessons use by default: CUDA in CUDA mode, else the CPU."""
    import torch

    return torch.device(device or ("cuda" if cuda_mode() else "cpu"))


def detect() -> Env:
    import torch

    cuda = cuda_mode()
    kit = find_toolkit(torch.version.cuda) if torch.version.cuda else None
    problems = []
    gpu = cap = None
    if cuda:
        gpu = torch.cuda.get_device_name()
        cap = torch.cuda.get_device_capability()
        p = toolkit_problem(kit, torch.version.cuda)
        if p:
            problems.append(p)
    elif torch.cuda.is_available():
        problems.append("COURSE_DEVICE=cpu is set: running in CPU mode although a GPU is present.")
    else:  # torch.utils.cpp_extension warns "No CUDA runtime is found" on import: expected in CPU mode
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    if kit is not None:
        os.environ["CUDA_HOME"] = str(kit.root)
        if "torch.utils.cpp_extension" in sys.modules:  # it reads CUDA_HOME once, at import
            sys.modules["torch.utils.cpp_extension"].CUDA_HOME = str(kit.root)
    return Env(
        mode="cuda" if cuda else "cpu",
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        gpu=gpu,
        capability=cap,
        toolkit=kit,
        problems=problems,
        solutions=solutions_enabled(),
    )


def _script_dirs() -> list[Path]:
    """Where `pip install` puts a package's programs: this Python's scripts folder, the user scheme's (pip
    install --user, which pip falls back to when site-packages is read-only), or $PIP_TARGET/bin."""
    dirs = [Path(sysconfig.get_paths()["scripts"]), Path(sysconfig.get_paths(f"{os.name}_user")["scripts"])]
    if os.environ.get("PIP_TARGET"):
        dirs.append(Path(os.environ["PIP_TARGET"], "bin"))
    return dirs


def _ensure_ninja() -> str | None:
    """torch's load/load_inline need the ninja build tool; Colab lacks it, so install it there (from PyPI, or
    wherever pip is configured to look) and put the folder pip installed it into on PATH."""
    if shutil.which("ninja"):
        return None
    if in_colab():
        print("Installing ninja (torch's load() needs it) ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ninja"], check=False)
        for bindir in _script_dirs():
            if (bindir / "ninja").is_file():
                os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ['PATH']}"
                break
        if shutil.which("ninja"):
            return None
    return (
        "ninja is not installed: torch's load()/load_inline() will refuse to build "
        "(the course's own loader does not need it). Fix: `pip install ninja`."
    )


def bootstrap(solutions: bool | None = None, quiet: bool = False) -> Env:
    """Report the machine and switch to CPU mode when there is no GPU. Call once at the top of a notebook.

    solutions: True loads exercise solutions instead of your files (same as COURSE_SOLUTIONS=1).
    """
    if solutions is not None:
        os.environ["COURSE_SOLUTIONS"] = "1" if solutions else "0"
    env = detect()
    ninja = _ensure_ninja()
    if ninja:
        env.problems.append(ninja)
    if not quiet:
        print(report(env))
    return env


def report(env: Env) -> str:
    kit = env.toolkit
    lines = [
        f"mode       : {env.mode.upper()}"
        + ("" if env.cuda else "  (no CUDA GPU: CUDA cells are skipped, CPU code runs)"),
        f"GPU        : {env.gpu} (sm_{env.capability[0]}{env.capability[1]})" if env.cuda else "GPU        : none",
        f"torch      : {env.torch} (CUDA {env.torch_cuda or 'none: CPU build'})",
        f"nvcc       : {kit.version} at {kit.root}" if kit else "nvcc       : not found",
        f"python     : {platform.python_version()}   exercises: {'SOLUTIONS' if env.solutions else 'your files'}",
        f"build cache: {cache_root()}",
    ]
    lines += [f"WARNING    : {p}" for p in env.problems]
    return "\n".join(lines)


if __name__ == "__main__":
    if "--ensure-nvcc" in sys.argv:
        ensure_toolkit()
    elif "--badges" in sys.argv:
        for path in write_badges():
            print(f"wrote {path.relative_to(REPO_ROOT)}")
    else:
        print(report(bootstrap(quiet=True)))
