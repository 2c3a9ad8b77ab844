"""The habits CI enforces: ruff lint and format for Python, clang-format for kernels/."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tool(name):
    path = shutil.which(name) or (
        Path(sys.executable).parent / name if (Path(sys.executable).parent / name).exists() else None
    )
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (requirements.txt installs it)")
        pytest.skip(f"{name} not installed here")
    return str(path)


def test_ruff_lint():
    r = subprocess.run([tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format():
    r = subprocess.run([tool("ruff"), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr + "\nrun `make format`"


def test_clang_format_kernels():
    files = sorted(str(p) for p in (ROOT / "kernels").rglob("*") if p.suffix in {".cu", ".cuh", ".h", ".cpp"})
    r = subprocess.run([tool("clang-format"), "--dry-run", "--Werror", *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:] + "\nrun `make format`"


_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
_TORCH = ("torch/", "ATen/", "c10/")


def _includes(path: Path, seen=None) -> set[str]:
    """Every header `path` includes, transitively through the course's own headers."""
    seen = set() if seen is None else seen
    for inc in _INCLUDE.findall(path.read_text()):
        if inc in seen:
            continue
        seen.add(inc)
        for d in (path.parent, ROOT / "kernels", ROOT / "kernels" / "solutions"):
            if (d / inc).is_file():
                _includes(d / inc, seen)
                break
    return seen


def test_exercise_files_are_compiled_only_without_torch_headers():
    """The exercise loop: an edit to a file in kernels/exercises/ must recompile only translation units that
    include no torch header (about a second), never the .cpp glue that parses all of torch's (20-60 s)."""
    exercise_headers = {p.name for p in (ROOT / "kernels" / "solutions").iterdir() if p.is_file()}
    offenders = []
    for tu in sorted((ROOT / "kernels").glob("*.c*")):
        incs = _includes(tu)
        if any(i.startswith(_TORCH) for i in incs) and incs & exercise_headers:
            offenders.append(f"{tu.name} includes torch headers and {sorted(incs & exercise_headers)}")
    assert not offenders, (
        "move the exercise's use into a torch-free part (kernels/OP.exercises.cpp/.cu):\n" + "\n".join(offenders)
    )
