"""The loader's process side: errors people can read, builds written atomically, locks between processes,
and the progress line of a long build."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .. import env as _env


class BuildError(RuntimeError):
    """A compile or link error, already formatted for people. Notebooks show just the message."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log

    def _render_traceback_(self):  # IPython: print this instead of a traceback through the loader
        first, *rest = str(self).splitlines() or [""]
        return [f"\x1b[31mBuildError\x1b[0m: {first}", *rest]


# --------------------------------------------------------------------------------------------------
# Locking and progress
# --------------------------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Lock:
    """One build of an extension at a time. A lock whose process is gone (a killed kernel) is stale."""

    def __init__(self, path: Path, timeout: float = 900):
        self.path, self.timeout = path, timeout

    def __enter__(self):
        start, told = time.time(), False
        me = f"{socket.gethostname()} {os.getpid()} {time.time():.0f}"
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.write(fd, me.encode())
                os.close(fd)
                return self
            except FileExistsError:
                pass
            try:
                host, pid, _ = self.path.read_text().split()
            except (OSError, ValueError):
                host, pid = "", "0"
            if (host == socket.gethostname() and not _pid_alive(int(pid))) or not host:
                print(f"Removing a stale build lock left by an interrupted build (pid {pid}): {self.path}")
                self.path.unlink(missing_ok=True)
                continue
            if time.time() - start > self.timeout:
                raise BuildError(
                    f"{self.path} is held by {host} pid {pid} for over {self.timeout:.0f} s. "
                    f"If no build is running there, delete that file and re-run."
                )
            if not told:
                print(f"Waiting for another build (pid {pid} on {host}) to finish ...", flush=True)
                told = True
            time.sleep(0.5)

    def __exit__(self, *exc):
        self.path.unlink(missing_ok=True)


def _interactive() -> bool:
    return "ipykernel" in sys.modules or (hasattr(sys.stdout, "isatty") and sys.stdout.isatty())


class _Progress:
    """Prints elapsed seconds while the compiler runs (in place in Jupyter and terminals)."""

    def __init__(self, text: str):
        self.text, self.start, self.done = text, time.time(), threading.Event()
        self.live = _interactive()

    def __enter__(self):
        print(self.text + " ...", end="" if self.live else "\n", flush=True)
        if self.live:
            threading.Thread(target=self._tick, daemon=True).start()
        return self

    def _tick(self):
        while not self.done.wait(1.0):
            print(f"\r{self.text} ... {time.time() - self.start:.0f} s", end="", flush=True)

    def __exit__(self, *exc):
        self.done.set()
        status = "failed" if exc[0] else "done"
        print(f"\r{self.text} ... {status} in {time.time() - self.start:.1f} s", flush=True)


# --------------------------------------------------------------------------------------------------
# Compile errors, made readable
# --------------------------------------------------------------------------------------------------

_GCC_ERR = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<msg>.*)$", re.M)
_NVCC_ERR = re.compile(r"^(?P<file>\S[^(]*)\((?P<line>\d+)\): (?:catastrophic )?error: (?P<msg>.*)$", re.M)


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(_env.REPO_ROOT))
    except ValueError:
        return path


def format_errors(log: str, limit: int = 3) -> str:
    """The first few compiler errors as `file:line: message` plus the source line and a caret."""
    hits = sorted([m for rx in (_GCC_ERR, _NVCC_ERR) for m in rx.finditer(log)], key=lambda m: m.start())
    out = []
    for m in hits[:limit]:
        f, line = m.group("file"), int(m.group("line"))
        out.append(f"{_rel(f)}:{line}: error: {m.group('msg').strip()}")
        try:
            src = Path(f).read_text(errors="replace").splitlines()[line - 1]
            out.append(f"    {line:4d} | {src}")
            col = m.groupdict().get("col")
            if col:
                out.append("         | " + " " * (int(col) - 1) + "^")
        except (OSError, IndexError):
            pass
    if len(hits) > limit:
        out.append(f"... and {len(hits) - limit} more error(s)")
    if not hits:  # a linker error or something else: show the tail
        out.append("\n".join(log.strip().splitlines()[-15:]))
    return "\n".join(out)


def _run(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log = f"$ {shlex.join(cmd)}\n{proc.stdout}{proc.stderr}"
        raise BuildError(f"{what} failed:\n{format_errors(proc.stdout + proc.stderr)}", log)
    return proc.stdout + proc.stderr


def _atomic(target: Path, build) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        build(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
