import os
import subprocess
import sys
from pathlib import Path

from helpers import env


def test_toolkit_problem_wording():
    kit = env.Toolkit(Path("/opt/cuda"), Path("/opt/cuda/bin/nvcc"), "12.8")
    assert env.toolkit_problem(kit, None) is None
    assert env.toolkit_problem(kit, "12.8") is None
    assert "minor" in env.toolkit_problem(kit, "12.6")
    assert "major" in env.toolkit_problem(kit, "13.0") and "--ensure-nvcc" in env.toolkit_problem(kit, "13.0")
    assert "no nvcc found" in env.toolkit_problem(None, "13.0")


def test_report_mentions_mode_and_versions(capsys):
    e = env.bootstrap()
    out = capsys.readouterr().out
    assert f"mode       : {e.mode.upper()}" in out
    assert e.torch in out


def test_cpu_mode_can_be_forced(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    e = env.bootstrap(quiet=True)
    assert e.mode == "cpu" and str(e.device) == "cpu"
    assert e.need_gpu("the CUDA benchmark") is False
    assert "skipped: the CUDA benchmark needs a CUDA GPU" in capsys.readouterr().out


def test_solutions_switch(monkeypatch):
    monkeypatch.delenv("COURSE_SOLUTIONS", raising=False)
    assert env.bootstrap(quiet=True).solutions is False
    assert env.bootstrap(solutions=True, quiet=True).solutions is True
    monkeypatch.setenv("COURSE_SOLUTIONS", "0")


def test_course_kernels_points_the_loader_at_a_copy(tmp_path):
    """benchmarks/loader_times.py edits a copy of kernels/ this way; the tracked files are never touched."""
    code = "from helpers import env; print(env.KERNELS)"
    run = dict(cwd=env.REPO_ROOT, capture_output=True, text=True, check=True)
    moved = subprocess.run([sys.executable, "-c", code], env={**os.environ, "COURSE_KERNELS": str(tmp_path)}, **run)
    assert moved.stdout.strip() == str(tmp_path.resolve())
    plain = {k: v for k, v in os.environ.items() if k != "COURSE_KERNELS"}
    assert subprocess.run([sys.executable, "-c", code], env=plain, **run).stdout.strip() == str(
        env.REPO_ROOT / "kernels"
    )
