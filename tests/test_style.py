"""The habits CI enforces: ruff lint and format for Python, clang-format for kernels/."""

import os
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
