"""Colab, as far as CI can go without it: the "Open in Colab" badges and the bootstrap cells agree with the one
published setting (helpers.env.PUBLISHED_REPO / PUBLISHED_REF); lesson 00's first cells run the way Colab runs
them (google.colab importable, no kernels/ in the working directory, the course cloned at the pinned release
from a local bare copy, ninja missing and installed by pip); Colab's toolchain (nvcc 12.8, which CI cannot
install: see README) is stood in for by compiling every source that tests the CUDA version with the version
forced to 12.0 (every fallback taken) and checking that no guard tests a version above 12.8 (so 12.8 builds what
this nvcc builds); and environment.yml, which CI cannot create (no conda), says what requirements.txt
says."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from helpers import env, loader

ROOT = env.REPO_ROOT
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")


def _cells(path: Path, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == kind]


# --------------------------------------------------------------------------------------------------
# Badges and the published setting
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_opens_with_its_colab_badge(path):
    first = _cells(path, "markdown")[0]
    assert env.colab_badge(path.name) in first, (
        f"{path.name}: its first markdown cell lacks {env.colab_badge(path.name)}: run `python -m helpers.env --badges`"
    )
    assert sum(len(BADGE.findall(text)) for text in _cells(path, "markdown")) == 1, f"{path.name}: one badge only"


def test_readme_has_the_badge_of_every_notebook_and_no_other():
    readme = (ROOT / "README.md").read_text()
    want = {env.colab_badge(p.name) for p in NOTEBOOKS}
    found = set(BADGE.findall(readme))
    assert want <= found, f"README.md lacks {sorted(want - found)}: run `python -m helpers.env --badges`"
    assert found <= want, f"README.md has badges of no notebook or of another release: {sorted(found - want)}"


def test_badges_are_what_the_published_setting_writes(tmp_path):
    """write_badges on a copy changes nothing: every badge is derived from PUBLISHED_REPO/PUBLISHED_REF."""
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    assert env.write_badges(tmp_path) == []
    # and from files without badges, it writes exactly the committed ones
    for path in (tmp_path / "notebooks").glob("*.ipynb"):
        nb = json.loads(path.read_text())
        cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
        cell["source"] = re.sub(r"\n\n" + BADGE.pattern, "", "".join(cell["source"])).splitlines(keepends=True)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    readme = tmp_path / "README.md"
    readme.write_text(re.sub(" " + BADGE.pattern, "", readme.read_text()))
    for path in [*(tmp_path / "notebooks").glob("*.ipynb"), readme]:
        assert not BADGE.search(path.read_text()), path
    assert len(env.write_badges(tmp_path)) == len(NOTEBOOKS) + 1
    for path in [*NOTEBOOKS, ROOT / "README.md"]:
        assert (tmp_path / path.relative_to(ROOT)).read_text() == path.read_text(), f"{path.name} differs"
    assert env.colab_url("00_setup.ipynb") == (
        f"https://colab.research.google.com/github/{env.PUBLISHED_REPO}/blob/{env.PUBLISHED_REF}/notebooks/00_setup.ipynb"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_bootstrap_cell_clones_the_published_repository_at_the_published_ref(path):
    cell = _cells(path, "code")[0]
    git = re.search(r'COURSE_GIT = os\.environ\.get\("COURSE_GIT", "([^"]+)"\)', cell)
    ref = re.search(r'COURSE_REF = os\.environ\.get\("COURSE_REF", "([^"]+)"\)', cell)
    assert git and ref, f"{path.name}: the bootstrap cell no longer sets COURSE_GIT/COURSE_REF the way this test reads"
    assert git.group(1) == f"https://github.com/{env.PUBLISHED_REPO}.git"
    assert ref.group(1) == env.PUBLISHED_REF


# --------------------------------------------------------------------------------------------------
# Lesson 00's first cells, as Colab runs them
# --------------------------------------------------------------------------------------------------

COLAB_DIR = 'Path("/content/pytorch-cuda-kernels")'


def _published_copy(tmp: Path) -> Path:
    """A bare repository holding this working tree (what CI's clone is: the submitted commit), tagged with the
    published ref, as the public repository is."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    src = tmp / "snapshot"
    for name in filter(None, (f.decode() for f in files)):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    git = ["git", "-c", "user.name=course", "-c", "user.email=course@example.invalid", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=src, check=True)
    subprocess.run([*git, "add", "-A"], cwd=src, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "snapshot"], cwd=src, check=True)
    subprocess.run([*git, "tag", env.PUBLISHED_REF], cwd=src, check=True)
    bare = tmp / "published.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True)
    return bare


def _ninja_wheel(folder: Path) -> Path:
    """The ninja wheel Colab's pip would fetch, from pip's cache or PyPI (the only network CI has)."""
    from importlib import metadata

    folder.mkdir()
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"ninja=={metadata.version('ninja')}"]
    proc = subprocess.run([*cmd, "-d", str(folder)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 or not list(folder.glob("ninja-*.whl")):
        pytest.skip(f"no ninja wheel to install (no pip cache and no PyPI here): {proc.stderr[-300:]}")
    return folder


def test_lesson_00_first_cells_run_as_on_colab(tmp_path, monkeypatch):
    """google.colab importable; the notebook opened from a folder without kernels/ (Colab's /content, here a
    scratch folder); COURSE_GIT pointing at a local bare copy of the course, COURSE_REF left at its pinned
    default; no ninja on PATH, and pip (offline, from a local wheel) installing it where $PIP_TARGET says.
    The bootstrap must clone the release, install ninja and report no problem about it; the next cell must run."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    wheels = _ninja_wheel(tmp_path / "wheels")
    bare = _published_copy(tmp_path)
    content, cwd, bin_dir, pip_target = (tmp_path / d for d in ("content", "opened-here", "bin", "pip-target"))
    for d in (content, cwd, bin_dir):
        d.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))  # PATH: git, and no ninja
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("COURSE_GIT", f"file://{bare}")
    monkeypatch.delenv("COURSE_REF", raising=False)
    monkeypatch.delenv("COURSE_SOLUTIONS", raising=False)
    for var, value in (("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", str(wheels)), ("PIP_TARGET", str(pip_target))):
        monkeypatch.setenv(var, value)

    nb = nbformat.read(ROOT / "notebooks" / "00_setup.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"][:2]
    assert code[0].source.count(COLAB_DIR) == 1, f"the bootstrap cell no longer clones into {COLAB_DIR}"
    code[0].source = code[0].source.replace(COLAB_DIR, f'Path("{content}/pytorch-cuda-kernels")')
    fake_colab = nbformat.v4.new_code_cell(
        'import sys, types\nsys.modules["google.colab"] = types.ModuleType("google.colab")'
    )
    nb.cells = [fake_colab, *code]
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    client.execute()

    clone = content / "pytorch-cuda-kernels"
    assert (clone / "kernels").is_dir() and (clone / "helpers" / "env.py").is_file()
    tags = subprocess.run(["git", "-C", str(clone), "tag", "--points-at", "HEAD"], capture_output=True, text=True)
    assert env.PUBLISHED_REF in tags.stdout.split(), "the clone is not at the published ref"
    report = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert "Installing ninja" in report and "ninja is not installed" not in report, report
    assert (pip_target / "bin" / "ninja").is_file(), "pip did not install ninja"
    assert "mode       : " in report and "torch      : " in report
    assert "torch" in "".join(o.get("text", "") for o in nb.cells[2].outputs)


# --------------------------------------------------------------------------------------------------
# Colab's toolchain: nvcc 12.8 for sm_75, stood in for by nvcc 13.0 with the version forced
# --------------------------------------------------------------------------------------------------

VERSION_TEST = re.compile(r"__CUDACC_VER_(MAJOR|MINOR)__")
# The oldest CUDA 12, where every fallback is taken. Colab's nvcc 12.8 takes the branches this nvcc (13) takes
# while no guard tests a version above 12.8 (test_colabs_nvcc_takes_this_nvccs_branches): tests/ops/test_compile.py
# compiles those for sm_75.
FORCED = {"12.0": (12, 0)}
COLAB = (12, 8)


def _guarded_sources() -> list[Path]:
    """The .cu files whose own text, or a course header they include, tests the CUDA version."""
    includes = [env.KERNELS / "solutions", env.KERNELS]
    return sorted(
        cu
        for cu in env.KERNELS.glob("*/*.cu")
        if any(VERSION_TEST.search(d.read_text(errors="replace")) for d in loader._local_deps(cu, includes))
    )


def _force_header(tmp: Path, major: int, minor: int) -> Path:
    """A header given with -include: the system headers the kernels use first (the toolkit's own headers check
    that the version macros are the compiler's), then the version macros redefined, for the course's code only."""
    system = set()
    for f in [*env.KERNELS.rglob("*.cu"), *env.KERNELS.rglob("*.cuh"), *env.KERNELS.rglob("*.h")]:
        for inc in re.findall(r"^\s*#\s*include\s*<([^>]+)>", f.read_text(errors="replace"), re.M):
            if not inc.startswith(("torch/", "ATen/", "c10/", "pybind11/")):
                system.add(inc)
    text = "".join(f"#include <{inc}>\n" for inc in sorted(system))
    text += "#undef __CUDACC_VER_MAJOR__\n#undef __CUDACC_VER_MINOR__\n"
    text += f"#define __CUDACC_VER_MAJOR__ {major}\n#define __CUDACC_VER_MINOR__ {minor}\n"
    path = tmp / f"cuda_{major}_{minor}.h"
    path.write_text(text)
    return path


def _nvcc(tmp: Path, source: Path, forced: Path, arch: str = "75") -> subprocess.CompletedProcess:
    import torch

    kit = env.find_toolkit(torch.version.cuda)
    if kit is None:
        pytest.skip("no nvcc here")
    cmd = [str(kit.nvcc), "-std=c++17", "-O0", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC"]
    cmd += ["-gencode", f"arch=compute_{arch},code=sm_{arch}", "-include", str(forced)]
    cmd += ["-I", str(env.KERNELS / "solutions"), "-I", str(env.KERNELS), "-c", str(source)]
    cmd += ["-Xcicc", "-O0", "-Xptxas", "-O0"]  # a compile check: unoptimized code (host and device) builds fastest
    return subprocess.run([*cmd, "-o", str(tmp / f"{source.name}.o")], capture_output=True, text=True)


def test_forcing_the_cuda_version_takes_effect(tmp_path):
    probe = tmp_path / "probe.cu"
    probe.write_text(
        "#include <cuda_runtime.h>\n#if __CUDACC_VER_MAJOR__ != 12 || __CUDACC_VER_MINOR__ != 8\n"
        '#error "the version was not forced"\n#endif\n__global__ void k() {}\n'
    )
    done = _nvcc(tmp_path, probe, _force_header(tmp_path, 12, 8))
    assert done.returncode == 0, done.stderr


def test_colabs_nvcc_takes_this_nvccs_branches():
    """Every version test in the kernels is "CUDA >= 12.x" with x <= 8 (or a major version <= 12), so nvcc 12.8
    and this nvcc build the same code."""
    guards, odd = [], []
    for f in [*env.KERNELS.rglob("*.cu"), *env.KERNELS.rglob("*.cuh"), *env.KERNELS.rglob("*.h")]:
        for line in f.read_text(errors="replace").splitlines():
            if VERSION_TEST.search(line):
                minors = re.findall(r"__CUDACC_VER_MINOR__\s*>=\s*(\d+)", line)
                majors = re.findall(r"__CUDACC_VER_MAJOR__\s*(?:>|>=|==)\s*(\d+)", line)
                if not minors and not majors:
                    odd.append(f"{f.name}: {line.strip()}")
                guards += [(12, int(m)) for m in minors] + [(int(m), 0) for m in majors]
    assert not odd, "a version test this check cannot read; extend it:\n" + "\n".join(odd)
    assert guards and max(guards) <= COLAB, f"a guard tests a version above Colab's {COLAB}: add it to FORCED"


def test_there_are_sources_guarded_by_the_cuda_version():
    assert _guarded_sources(), "no kernel tests __CUDACC_VER_*: drop the forced-version builds, or fix the search"


@pytest.mark.parametrize("version", FORCED, ids=lambda v: f"cuda{v}")
@pytest.mark.parametrize("source", _guarded_sources(), ids=lambda p: p.name)
def test_guarded_source_compiles_for_sm75_as_under_an_older_nvcc(source, version, tmp_path):
    done = _nvcc(tmp_path, source, _force_header(tmp_path, *FORCED[version]))
    assert done.returncode == 0, (
        f"kernels/{source.name} with the CUDA version forced to {version}:\n{done.stderr[-3000:]}"
    )


# --------------------------------------------------------------------------------------------------
# environment.yml
# --------------------------------------------------------------------------------------------------


def test_environment_yml_is_requirements_txt_for_conda():
    """conda cannot run here: what can be checked is that the file parses, names a Python the package accepts,
    and that its pip section is requirements.txt itself (conda runs pip from the file's folder)."""
    yaml = pytest.importorskip("yaml")
    spec = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert spec["name"] and "conda-forge" in spec["channels"]
    deps = spec["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python="))
    major, minor = map(int, python.removeprefix("python=").split(".")[:2])
    least = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"].removeprefix(">=")
    assert (major, minor) >= tuple(map(int, least.split("."))), f"{python} is older than requires-python {least}"
    assert "pip" in deps
    (pip,) = [d["pip"] for d in deps if isinstance(d, dict)]
    assert pip == ["-r requirements.txt"], f"the pip section should be requirements.txt, listed once: {pip}"
    assert (ROOT / "requirements.txt").is_file()
