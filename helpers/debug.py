"""Lesson 07's tools for a kernel that is wrong, crashes or hangs.

    child = debug.run_isolated("import torch; ...")   # in a new Python process: a crash ends it, not the notebook
    child.show()                                      # its exit, the time it took and the end of its output
    with debug.captured_stdout() as out:              # what kernels printf (C's stdout, not Python's)
        ext.double_printf(x)
    print(out.text)
    debug.scan(fn, reference, make_input, sizes)      # narrow down: which sizes fail, and the first bad element

Why a child process: a kernel that faults (an illegal address, a device-side assert) leaves a *sticky* error
in its process's CUDA context: every later CUDA call in that process fails with the same error, and only a new
process recovers (in Jupyter: Kernel -> Restart). The lesson runs each risky demonstration in a child process
so that the notebook goes on; run_isolated is that mechanism, and compute-sanitizer (helpers.sanitizer) runs the
same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import torch

from . import check, env

# What a child process runs first: the course on sys.path, its build cache and COURSE_SOLUTIONS as here.
_PRELUDE = f"""import sys
sys.path.insert(0, {str(env.REPO_ROOT)!r})
"""


@dataclasses.dataclass
class Child:
    """A finished child process: its exit code (negative: killed by that signal), output and wall time."""

    code: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def exit(self) -> str:
        if self.timed_out:
            return f"killed after {self.seconds:.0f} s (the time limit)"
        if self.returncode < 0:
            return f"killed by {signal.Signals(-self.returncode).name}"
        return f"exit code {self.returncode}"

    def show(self, tail: int = 20) -> None:
        """Print how the process ended and the last `tail` lines of what it printed (stdout, then stderr)."""
        print(f"child process: {self.exit()}, {self.seconds:.1f} s")
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            lines = [line for line in text.rstrip().splitlines() if line.strip()]
            if lines:
                cut = f" (last {tail} of {len(lines)} lines)" if len(lines) > tail else ""
                print(f"--- {name}{cut}")
                print("\n".join(lines[-tail:]))


def run_isolated(code: str, *, env_vars: dict | None = None, timeout: float = 600) -> Child:
    """`code` (Python source; dedented) in a new Python process started from the course folder, with this
    process's environment plus `env_vars` (say CUDA_LAUNCH_BLOCKING="1"). It never raises for what the child
    does: a crash, an exception or the time limit is in the returned Child."""
    source = _PRELUDE + textwrap.dedent(code)
    environ = {**os.environ, **{k: str(v) for k, v in (env_vars or {}).items()}}
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", source],
            cwd=env.REPO_ROOT,
            env=environ,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return Child(source, -9, out, err, time.perf_counter() - t0, timed_out=True)
    return Child(source, done.returncode, done.stdout, done.stderr, time.perf_counter() - t0)


class _Captured:
    text = ""


@contextlib.contextmanager
def captured_stdout():
    """Capture what the process writes to file descriptor 1 inside the block: C's printf and a kernel's printf,
    which Jupyter does not show (it shows Python's sys.stdout only). A kernel's printf lands in a buffer on the
    GPU that the driver copies out at the next synchronization: the block ends with torch.cuda.synchronize()."""
    import ctypes

    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    result = _Captured()
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield result
        finally:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            result.text = tmp.read().decode(errors="replace")


@dataclasses.dataclass
class ScanRow:
    size: object
    ok: bool
    bad: int  # elements outside the tolerance
    first: str  # the first bad element: its index, value and the reference's, or ""


def scan(fn, reference, make_input, sizes, *, rtol: float = 1e-5, atol: float = 1e-5) -> list[ScanRow]:
    """Narrowing down from Python: fn(*make_input(size)) against reference(*make_input(size)) for each size
    (one dimension varied at a time), with outputs poisoned with NaN first. Prints one line per size and
    returns the rows: where the failures start says which part of the kernel to read."""
    rows = []
    for size in sizes:
        inputs = make_input(size)
        with check.poisoned():
            got = fn(*inputs)
        want = reference(*inputs)
        a, e = got.detach().double().cpu(), want.detach().double().cpu()
        bad = ~torch.isclose(a, e, rtol=rtol, atol=atol)
        n = int(bad.sum())
        first = ""
        if n:
            i = tuple(int(v) for v in bad.nonzero()[0])
            first = f"first at [{', '.join(map(str, i))}]: got {a[i].item():.6g}, expected {e[i].item():.6g}"
        rows.append(ScanRow(size, n == 0, n, first))
        print(f"{str(size):>14}: {'ok' if n == 0 else f'{n} of {a.numel()} wrong, ' + first}")
    return rows


def sanitize(code: str, tool: str = "memcheck", *, caching: bool = False, timeout: float = 600):
    """`code` (Python source, dedented) as a script run under compute-sanitizer's `tool` in a child process
    (helpers.sanitizer.run); returns its Report (.summary(), .show(), .errors). caching=True leaves PyTorch's
    caching allocator on, to show what it hides; the default turns it off (PYTORCH_NO_CUDA_MEMORY_CACHING=1)."""
    from . import sanitizer

    script = env.cache_root() / "debug" / f"sanitize_{os.getpid()}.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(_PRELUDE + textwrap.dedent(code))
    return sanitizer.run([sys.executable, str(script)], tool, timeout=timeout, cwd=env.REPO_ROOT, caching=caching)
