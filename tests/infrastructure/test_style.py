"""The habits CI enforces: ruff lint and format for Python, clang-format for kernels/."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


def test_exercise_files_are_compiled_only_without_torch_headers_or_alone():
    """The exercise loop: an edit to a file in kernels/exercises/ must recompile only translation units that
    include no torch header (about a second), never the .cpp glue that parses all of torch's (20-60 s). An
    exercise that is glue itself (a binding, a registration) has a translation unit of its own that compiles
    that exercise and nothing else of the op (kernels/OP/OP.NAME.cpp: torch's headers, kernels/common/ and the
    one exercise), so its loop is one small compile that the precompiled torch header makes fast."""
    exercise_headers = {p.name for p in (ROOT / "kernels" / "solutions").iterdir() if p.is_file()}
    offenders = []
    for tu in sorted((ROOT / "kernels").glob("*/*.c*")):
        incs = _includes(tu)
        mine = incs & exercise_headers
        if not any(i.startswith(_TORCH) for i in incs) or not mine:
            continue
        own = {i for i in _INCLUDE.findall(tu.read_text()) if not i.startswith(("common/", *_TORCH)) and "/" not in i}
        others = own - mine - {"cstdint", "string", "tuple", "vector", "array", "optional"}
        if len(mine) > 1 or others:
            offenders.append(f"{tu.name} includes torch headers, {sorted(mine)} and {sorted(others)}")
    assert not offenders, (
        "move the exercise's use into a torch-free part (kernels/OP/OP.exercises.cpp/.cu), or, for a glue\n"
        "exercise, into a translation unit that compiles that exercise alone:\n" + "\n".join(offenders)
    )


# Code states decisions and their reasons, not a lab log: no dates, paths into results/, issue numbers or run
# names in kernels/, helpers/, benchmarks/ or tests/ (the measurements live in results/, the history in git).
# Each pattern is written so that these lines do not match it themselves.
_LAB_LOG_FOLDERS = ("kernels", "helpers", "benchmarks", "tests")
_LAB_LOG = re.compile(
    "|".join(
        (
            r"(?<!\d)20\d\d-[01]\d-[0-3]\d(?!\d)",  # an ISO date
            "results" + r"/[\w*][^\s\"'`),;:]*(?<!\.)",  # a path in it (not the bare folder, results/<gpu>)
            r"\bissues? ?#?\d+",  # an issue number, with or without '#', one or a range
            r"\brun ?\d+\b|_run\d+",  # a run's name
        )
    ),
    re.IGNORECASE,
)
# Data, not history: (file, matched text) -> why it stays.
_LAB_LOG_ALLOWED = {
    ("benchmarks/autograd.py", "results" + "/cpu"): "default_out(): the output folder on a machine without a GPU",
}


def _source_files(folders) -> list[str]:
    """The files under `folders` that git tracks or would track (new and not ignored), relative to ROOT;
    outside a git checkout, every file there but build output and caches."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *folders],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        paths = {p for p in out.split("\0") if p}
    except (OSError, subprocess.CalledProcessError):
        skip = {"__pycache__", "build", "dist", ".pytest_cache", ".ruff_cache"}
        paths = {
            p.relative_to(ROOT).as_posix()
            for f in folders
            for p in (ROOT / f).rglob("*")
            if p.is_file() and not skip & set(p.relative_to(ROOT).parts) and ".egg-info" not in str(p)
        }
    return sorted(p for p in paths if (ROOT / p).is_file())  # a tracked file deleted in the tree is gone


def lab_log(folders=_LAB_LOG_FOLDERS) -> list[str]:
    """'file:line: text' for every lab-log trace in the text files under `folders`."""
    found = []
    for rel in _source_files(folders):
        data = (ROOT / rel).read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            for m in _LAB_LOG.finditer(line):
                if (rel, m.group(0)) not in _LAB_LOG_ALLOWED:
                    found.append(f"{rel}:{n}: {m.group(0)!r} in {line.strip()[:160]}")
    return found


def test_code_has_no_lab_log():
    """A comment states the decision and why, with a magnitude where it matters and the card where the number
    is hardware-specific; a date, a results/ file, an issue or a run it came from does not belong there."""
    found = lab_log()
    for f in found:
        print(f)
    assert not found, (
        f"{len(found)} lab-log trace(s): state the decision and its reason instead (the fact, not where or when "
        "it was measured):\n" + "\n".join(found)
    )


def lesson_lab_log() -> list[str]:
    """'notebook cell N: text' for every lab-log trace in a lesson's markdown and code (a date, a results/ path,
    an issue number, a run's name), and every acceptance printout (a target "met"/"MISSED" line): a lesson
    teaches the mechanism in the present tense; the history is in docs/ and git."""
    printout = re.compile(r"\bMISSED\b|\btargets?\b[^\n]*\bmet\b|\bmet\b[^\n]*\btargets?\b", re.IGNORECASE)
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            text = "".join(cell["source"])
            for pattern in (_LAB_LOG, printout):
                for m in pattern.finditer(text):
                    found.append(f"{path.name} cell {i}: {m.group(0)!r}")
    return found


def test_lessons_have_no_lab_log():
    found = lesson_lab_log()
    assert not found, f"{len(found)} lab-log trace(s) in the lessons:\n" + "\n".join(found)
