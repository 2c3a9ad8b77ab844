"""Run a program under NVIDIA's compute-sanitizer and read its report as data (lesson 07).

    report = sanitizer.run([sys.executable, "my_check.py"], tool="memcheck")
    print(report.show())          # each finding: what, kernel, source line, thread
    assert report.ok, report.summary()

compute-sanitizer runs the program with every kernel instrumented. Its four tools each find one kind of bug:

    memcheck    an access outside any allocation, or misaligned (Invalid __global__ write of size 4 bytes)
    racecheck   two threads of a block touching the same shared memory with no barrier between them
    initcheck   a read of global memory that nothing wrote
    synccheck   a barrier (__syncthreads) that only some threads of a block or warp reach

A Report holds the tool's findings (Finding: kind, size, kernel, file:line, thread and block) and its own count
of errors; callers decide from those fields, never from the text. `find()` says where the tool is,
`missing_reason()` how to install it. Kernels built by helpers.loader carry -lineinfo, so findings name the
source line.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from . import env as _env

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# The tool counts every error in its summary but prints only this many: one faulty line in a kernel gives one
# error per thread, and 20 of them say all there is to say.
PRINT_LIMIT = 20
SYSTEM_ROOTS = (Path("/usr/local/cuda"),)  # searched after PATH and $CUDA_HOME

# What a finding is (Finding.kind): a closed set, so callers can branch on it.
INVALID_ACCESS = "invalid access"  # memcheck: out of bounds or misaligned, __global__/__shared__/__local__
HARDWARE_EXCEPTION = "hardware exception"  # memcheck: the GPU's own report (Warp Illegal Address, ...)
RACE = "race"  # racecheck: a shared-memory hazard between two accesses
UNINITIALIZED = "uninitialized read"  # initcheck
UNUSED_MEMORY = "unused memory"  # initcheck --track-unused-memory
BARRIER = "barrier"  # synccheck
API_ERROR = "api error"  # a CUDA API call that failed ("Program hit cudaErrorIllegalAddress ...")
LEAK = "leak"  # memcheck --leak-check full
SANITIZER = "sanitizer"  # the tool's own failure (Internal Sanitizer Error)


@dataclasses.dataclass
class Finding:
    """One problem the tool reported. location is "file:line" where the kernel was built with -lineinfo;
    kernel is the kernel (the outermost device frame) and function where the access happened (an inlined
    __device__ function may differ from the kernel). detail: the rest of what the tool said (the address and
    the nearest allocation, the other access of a race, the failing API call). context: the program's last
    line of output before the finding (a driver that prints each case first names the case here)."""

    kind: str
    what: str  # the tool's headline, e.g. "Invalid __global__ write of size 4 bytes"
    size: int | None = None  # bytes of the access
    kernel: str | None = None
    function: str | None = None
    location: str | None = None
    thread: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    detail: str = ""
    severity: str = "error"  # racecheck's "warning" hazards; everything else is an error
    context: str | None = None
    text: list[str] = dataclasses.field(default_factory=list)  # the raw lines, prefix removed


@dataclasses.dataclass
class Report:
    """A finished (or timed out) run. error_count is the tool's own total ("ERROR SUMMARY: N errors", or
    racecheck's "(N errors, M warnings)"), which counts past the printed findings; None when the tool printed
    no summary (it did not finish). returncode is the program's own exit status (None: killed on timeout)."""

    tool: str
    returncode: int | None
    seconds: float
    errors: list[Finding]
    error_count: int | None
    warning_count: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)  # the tool's lines that are no finding
    output: str = ""
    command: list[str] = dataclasses.field(default_factory=list)
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """The program ran to the end (exit status 0) and the tool counted no error. Racecheck's warnings
        (hazards it ranks below an error) are shown but do not fail a run."""
        return not self.timed_out and self.returncode == 0 and self.error_count == 0

    def summary(self) -> str:
        if self.timed_out:
            return f"{self.tool}: timed out after {self.seconds:.0f} s"
        s = f"{self.tool}: "
        if self.error_count is None:
            s += "no summary from the tool (it did not finish)"
        else:
            s += _plural(self.error_count, "error")
            if self.warning_count:
                s += f", {_plural(self.warning_count, 'warning')}"
        if self.returncode:
            s += f"; the program failed (exit status {self.returncode})"
        return s + f" ({self.seconds:.1f} s)"

    def show(self, limit: int = 5) -> str:
        """A readable report for a notebook: the summary line, then for each of the first `limit` findings
        what happened, in which kernel, at which source line (with the line's text where the file is here),
        by which thread; where the program failed without a finding, the end of its output."""
        lines = [("✅ " if self.ok else "❌ ") + self.summary()]
        for i, f in enumerate(self.errors[:limit], 1):
            lines.append(f"{i}. {f.what}" + (f" ({f.severity})" if f.severity != "error" else ""))
            if f.kernel:
                lines.append(f"   kernel:  {short(f.kernel)}")
            if f.function and f.function != f.kernel:
                lines.append(f"   in:      {short(f.function)}")
            if f.location:
                lines.append(f"   where:   {relative(f.location)}")
                src = source_line(f.location)
                if src:
                    lines.append(f"            {src}")
            if f.thread:
                where = f"thread {dims(f.thread)}" + (f" in block {dims(f.block)}" if f.block else "")
                lines.append(f"   by:      {where}")
            if f.detail:
                lines.append(f"   detail:  {f.detail}")
            if f.context:
                lines.append(f"   after:   {f.context}")
        if len(self.errors) > limit:
            lines.append(f"... and {len(self.errors) - limit} more findings (report.errors has them all)")
        if self.error_count and not self.errors:
            lines.append(f"The tool counted {_plural(self.error_count, 'error')} in lines this parser does not know:")
        lines += [f"   note: {n}" for n in self.notes[:limit]]
        if (self.returncode or self.timed_out or (self.error_count and not self.errors)) and self.output:
            tail = [line for line in self.output.splitlines() if line.strip() and not _PREFIX.match(line)][-15:]
            lines += ["   The program's last lines:"] + [f"   | {line}" for line in tail]
        return "\n".join(lines)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def dims(d) -> str:
    """A thread or block index as the tool prints it: (x,y,z)."""
    return "(" + ",".join(map(str, d)) + ")"


def short(name: str, width: int = 110) -> str:
    """A kernel's name cut to `width` characters (a templated kernel's signature runs to hundreds)."""
    return name if len(name) <= width else name[: width - 3] + "..."


def relative(location: str) -> str:
    """file:line with the file relative to the course folder where it is inside it."""
    path, _, line = location.rpartition(":")
    try:
        path = str(Path(path).resolve().relative_to(_env.REPO_ROOT))
    except (ValueError, OSError):
        pass
    return f"{path}:{line}"


def source_line(location: str) -> str | None:
    """The text of the source line a location names, where the file exists here."""
    path, _, line = location.rpartition(":")
    try:
        return Path(path).read_text(errors="replace").splitlines()[int(line) - 1].strip() or None
    except (OSError, ValueError, IndexError):
        return None


# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------

# The tool prefixes each of its lines with exactly nine '=' (pytest's rules of '=' are longer).
_PREFIX = re.compile(r"^={9}(?!=) ?(.*)$")
_HEADLINES = [  # (kind, pattern) in the order they are tried; "size" groups give the access size
    (INVALID_ACCESS, r"Invalid (?:__\w+__ )?(?:read|write|atomic)\w*(?: access)? of size (?P<size>\d+)"),
    (UNINITIALIZED, r"Uninitialized (?:__\w+__ )?memory read of size (?P<size>\d+)"),
    (UNINITIALIZED, r"Host API uninitialized memory access.*"),
    (UNUSED_MEMORY, r"Unused memory in allocation"),
    (RACE, r"(?:(?P<sev>Error|Warning|Info|ERROR|WARNING|INFO): )?Race reported between (?P<access>.+)"),
    (RACE, r"(?P<sev>Error|Warning|Info|ERROR|WARNING|INFO): Potential (?:RAW|WAR|WAW) hazard detected at .+"),
    (BARRIER, r"Barrier error detected.*"),
    (BARRIER, r"Invalid arguments? (?:detected|for) .*barrier.*"),
    (API_ERROR, r"Program hit (?P<err>\S+) \(error \d+\) due to \"(?P<msg>[^\"]*)\" on CUDA API call to (?P<call>\w+)"),
    (API_ERROR, r"Cuda API error detected: (?P<call>\w+) returned .*"),
    (HARDWARE_EXCEPTION, r"(?:Warp|Lane|Block) (?:Illegal|Misaligned|Out-of-range|Invalid|Hardware|User) .*"),
    (HARDWARE_EXCEPTION, r"(?:Misaligned|Out-of-range) Shared or Local Address.*"),
    (HARDWARE_EXCEPTION, r"(?:Device-side assert|Illegal Instruction|Malloc/Free error).*"),
    (LEAK, r"Leaked (?P<size>\d+) bytes? at .*"),
    (SANITIZER, r"Internal Sanitizer Error.*"),
]
_HEADLINES = [(kind, re.compile(p)) for kind, p in _HEADLINES]
# Where: "kernel(float *, int)+0x1d0 in /path/file.cu:12" (the current format), "kernel+0x80" (no
# -lineinfo), "0x1d0 in /path/file.cu:12:kernel(float*, int)" (compute-sanitizer before 2022).
_AT = [
    re.compile(r"^(?P<func>.+?)\+0x[0-9a-fA-F]+ in (?P<file>\S+?):(?P<line>\d+)(?: \(inlined\))?$"),
    re.compile(r"^0x[0-9a-fA-F]+ in (?P<file>[^:\s]+):(?P<line>\d+):(?P<func>.+)$"),
    re.compile(r"^(?P<func>.+?)\+0x[0-9a-fA-F]+$"),
    re.compile(r"^0x[0-9a-fA-F]+ in (?P<func>.+)$"),
]
# A device frame before 2022: "/path/file.cu:20:kernel(int*) (kernel(int*) : 0x8f0)"
_OLD_FRAME = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+):(?P<func>.+?) \(.*: 0x[0-9a-fA-F]+\)$")
_THREAD = re.compile(r"by thread \((\d+),(\d+),(\d+)\) in block \((\d+),(\d+),(\d+)\)")
_HAZARD_THREAD = re.compile(r"^(?:Read|Write|Atomic)\w* Thread \((\d+),(\d+),(\d+)\) at (.+?)$")
_HAZARD_BLOCK = re.compile(r"in block \((\d+),(\d+),(\d+)\)")
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed")
_RACE_COUNTS = re.compile(r"\((\d+) errors?, (\d+) warnings?\)")
_NOT_FINDINGS = re.compile(
    r"^(COMPUTE-SANITIZER|Target application returned an error|LEAK SUMMARY|This tool is deprecated|$)"
)


def _where(text: str) -> tuple[str | None, str | None]:
    """(function, "file:line") from what follows "at " in a finding's line."""
    text = text.strip()
    for pattern in _AT:
        m = pattern.match(text)
        if m:
            d = m.groupdict()
            return d["func"].strip(), (f"{d['file']}:{d['line']}" if d.get("file") else None)
    return None, None


def parse(output: str, tool: str = "memcheck") -> tuple[list[Finding], int | None, int, list[str]]:
    """(findings, error count, warning count, notes) from compute-sanitizer's output; the program's own
    lines (without the tool's prefix) are skipped but remembered as each finding's context."""
    findings: list[Finding] = []
    notes: list[str] = []
    count: int | None = None
    warnings = 0
    current: Finding | None = None
    context: str | None = None
    waiting_counts = False
    for raw in output.splitlines():
        m = _PREFIX.match(raw)
        if not m:
            if raw.strip():
                context = raw.strip()
            continue
        body = m.group(1)
        line = body.strip()
        if waiting_counts:  # racecheck's summary, its counts on a line of their own
            waiting_counts = False
            c = _RACE_COUNTS.search(line)
            if c:
                count = (count or 0) + int(c.group(1))
                warnings += int(c.group(2))
                continue
        s = _ERROR_SUMMARY.search(line)
        if s:
            count = (count or 0) + int(s.group(1))
            current = None
            continue
        s = _RACE_SUMMARY.search(line)
        if s:
            c = _RACE_COUNTS.search(line)
            if c:
                count = (count or 0) + int(c.group(1))
                warnings += int(c.group(2))
            else:
                waiting_counts = True
            current = None
            continue
        if body == line:  # no indent: a headline
            current = _headline(line, context)
            if current is not None:
                findings.append(current)
            elif not _NOT_FINDINGS.match(line):
                notes.append(line)
            continue
        if current is not None:
            _detail(current, line)
    return findings, count, warnings, notes


def _headline(line: str, context: str | None) -> Finding | None:
    for kind, pattern in _HEADLINES:
        m = pattern.match(line)
        if not m:
            continue
        d = m.groupdict()
        f = Finding(kind=kind, what=line, context=context, text=[line])
        if d.get("size"):
            f.size = int(d["size"])
        if d.get("sev"):
            f.severity = d["sev"].lower()
        if kind == RACE and d.get("access"):  # "Write access at kernel+0x140 in file.cu:12"
            f.what = "Race reported between " + d["access"].split(" access at ")[0].lower() + " access"
            f.function, f.location = _where(d["access"].split(" access at ", 1)[-1])
            f.kernel = f.function
        if kind == RACE and "hazard detected" in line:
            b = _HAZARD_BLOCK.search(line)
            if b:
                f.block = tuple(int(v) for v in b.groups())
        if kind == API_ERROR:
            f.detail = f"{d.get('err') or ''} {('(' + d['msg'] + ')') if d.get('msg') else ''}".strip()
            f.what = f"CUDA API call {d['call']} failed"
        return f
    return None


def _detail(f: Finding, line: str) -> None:
    f.text.append(line)
    if line.startswith("Host Frame") or line.startswith("Saved host backtrace") or line.startswith("in /"):
        return
    if line.startswith("at ") and f.location is None and f.function is None:
        f.function, f.location = _where(line[3:])
        f.kernel = f.function
        return
    if line.startswith("Device Frame:"):  # the outer frames: the last one is the kernel
        text = line[len("Device Frame:") :].strip()
        func, loc = _where(text)
        old = _OLD_FRAME.match(text)
        if func is None and old:
            func, loc = old.group("func").strip(), f"{old.group('file')}:{old.group('line')}"
        if func:
            f.kernel = func
            f.location = f.location or loc
        return
    t = _THREAD.search(line)
    if t:
        v = [int(x) for x in t.groups()]
        f.thread, f.block = tuple(v[:3]), tuple(v[3:])
        return
    h = _HAZARD_THREAD.match(line)
    if h:  # racecheck's hazard report: the first access's thread and place
        if f.thread is None:
            f.thread = tuple(int(x) for x in h.groups()[:3])
            f.function, f.location = _where(h.group(4))
            f.kernel = f.function
        else:
            f.detail = (f.detail + " " if f.detail else "") + line
        return
    if line.startswith("and ") and " access at " in line:  # racecheck: the other access of the race
        other = line[4:].split(" access at ")[0].lower()
        rest = line.split(" access at ", 1)[1]
        hazards = re.search(r"\[(\d+) hazards?\]", rest)
        _, where = _where(re.sub(r"\s*\[\d+ hazards?\]$", "", rest))
        part = f"and {other} access" + (f" at {relative(where)}" if where else "")
        part += f" ({hazards.group(1)} hazards)" if hazards else ""
        f.detail = (f.detail + "; " if f.detail else "") + part
        if " and " not in f.what:
            f.what += f" and {other} access"
        return
    f.detail = (f.detail + " " if f.detail else "") + line  # addresses, allocations, values


# --------------------------------------------------------------------------------------------------
# Finding the tool
# --------------------------------------------------------------------------------------------------


def _pip_candidates() -> list[Path]:
    """compute-sanitizer from NVIDIA's pip wheels: nvidia/cu13/bin/ (CUDA 13, nvidia-cuda-sanitizer-api),
    nvidia/cuda_sanitizer_api/bin/ (CUDA 12.9) or nvidia/cuda_sanitizer_api/compute-sanitizer/ (older)."""
    out = []
    for site in _env._site_packages():
        out += sorted(site.glob("nvidia/cu1[3-9]/bin/compute-sanitizer"), reverse=True)
        out += [site / "nvidia/cuda_sanitizer_api" / sub / "compute-sanitizer" for sub in ("bin", "compute-sanitizer")]
    return out


def candidates() -> list[Path]:
    """Where find() looks, in order: PATH, $CUDA_HOME (and $CUDA_PATH), /usr/local/cuda, the pip wheels."""
    out = []
    hit = shutil.which("compute-sanitizer")
    if hit:
        out.append(Path(hit))
    roots = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)] + list(SYSTEM_ROOTS)
    for root in roots:  # the toolkit's bin/ holds a link to compute-sanitizer/compute-sanitizer
        out += [root / "bin" / "compute-sanitizer", root / "compute-sanitizer" / "compute-sanitizer"]
    return out + _pip_candidates()


def _executable(path: Path) -> bool:
    """Whether `path` can run. The CUDA 12 wheels ship the tool without its execute bit: it is set here
    where the file is ours to change (a pip install in this environment)."""
    if not path.is_file():
        return False
    if os.access(path, os.X_OK):
        return True
    try:
        path.chmod(path.stat().st_mode | 0o111)
    except OSError:
        return False
    return os.access(path, os.X_OK)


def find() -> Path | None:
    """The compute-sanitizer to run, or None (missing_reason() then says how to install it)."""
    return next((p for p in candidates() if _executable(p)), None)


def install_hint() -> str:
    """The pip line that installs compute-sanitizer for this torch's CUDA."""
    try:
        import torch

        cuda = torch.version.cuda
    except ImportError:
        cuda = None
    if not cuda:
        return 'pip install "nvidia-cuda-sanitizer-api==13.0.*"'
    major = cuda.split(".")[0]
    package = "nvidia-cuda-sanitizer-api" if int(major) >= 13 else f"nvidia-cuda-sanitizer-api-cu{major}"
    return f'pip install "{package}=={cuda}.*"'


def missing_reason() -> str:
    """Why find() finds nothing, and how to get the tool; "" when it finds one."""
    if find() is not None:
        return ""
    stuck = [p for p in candidates() if p.is_file()]
    if stuck:
        return f"{stuck[0]} is there but cannot be run (no execute permission): chmod +x it."
    cuda = None
    try:
        import torch

        cuda = torch.version.cuda
    except ImportError:
        pass
    if cuda is None:
        return "torch here is a CPU build: compute-sanitizer checks CUDA kernels, so it needs a CUDA build of torch."
    return (
        "compute-sanitizer was not found (looked on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin and NVIDIA's pip "
        f"packages of this environment). Install it with `{install_hint()}` (NVIDIA's wheel for torch's CUDA "
        f"{cuda}), or install the CUDA toolkit, which ships it in bin/."
    )


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------


def command(
    argv: list[str], tool: str = "memcheck", extra=(), *, sanitizer: Path | str | None = None, api_errors: str = "no"
) -> list[str]:
    """The compute-sanitizer command line that runs `argv` under `tool`.

    --target-processes application-only: only the program itself; the compilers a first build starts (nvcc,
    g++) have no kernels, and instrumenting them costs time. --show-backtrace device: the device frames (which
    kernel called which function) without the host stack, which for a Python program is dozens of interpreter
    frames. --report-api-errors no (api_errors): libraries in a PyTorch process call CUDA functions that may
    fail by design (probing for driver entry points, for what a device supports) and decide from the answer;
    the tool would count each such call as an error. A kernel's own fault is still a finding of its own, and a
    failed launch of ours raises in the program (every launch is checked), so its exit status tells;
    api_errors="explicit" shows the failed calls ("Program hit cudaErrorIllegalAddress ...") too."""
    if tool not in TOOLS:
        raise ValueError(f"tool must be one of {', '.join(TOOLS)}, got {tool!r}")
    exe = str(sanitizer or find() or "compute-sanitizer")
    return [
        exe, "--tool", tool, "--print-limit", str(PRINT_LIMIT), "--target-processes", "application-only",
        "--show-backtrace", "device", "--report-api-errors", api_errors, *extra, *argv,
    ]  # fmt: skip


def child_env(env: dict | None = None, caching: bool = False) -> dict:
    """This process's environment, `env` on top, and PyTorch's caching allocator off (caching=False)."""
    out = {**os.environ, **(env or {})}
    # PyTorch's caching allocator carves tensors out of large blocks it took from cudaMalloc, so a kernel that
    # runs past the end of its tensor lands inside the same block, memory the tool sees as allocated: memcheck
    # would miss it. With caching off every tensor is its own cudaMalloc, whose end the tool knows.
    # (caching=True keeps the allocator, to show what it hides.)
    if caching:
        out.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)
    else:
        out["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    return out


def execute(cmd: list[str], env: dict | None = None, timeout: float | None = None, cwd=None):
    """Run cmd, its output and errors as one text. Returns (exit status or None if it ran past `timeout`,
    output, seconds). On a timeout the whole process group goes, so no program is left running on the GPU."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env, cwd=cwd,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out, time.perf_counter() - start
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, _ = proc.communicate()
        return None, out, time.perf_counter() - start


def run(
    argv: list[str],
    tool: str = "memcheck",
    env: dict | None = None,
    timeout: float | None = 600,
    extra=(),
    *,
    cwd=None,
    sanitizer: Path | str | None = None,
    api_errors: str = "no",
    caching: bool = False,
) -> Report:
    """Run `argv` (a program and its arguments) under compute-sanitizer's `tool` in a child process and parse
    what it reports. env: variables for the child on top of this process's; extra: more options for the tool
    (say ("--racecheck-report", "hazard") for every hazard with its threads). Raises FileNotFoundError with
    missing_reason() where there is no compute-sanitizer. caching=True leaves PyTorch's caching allocator on
    (child_env says why it is off)."""
    exe = sanitizer or find()
    if exe is None:
        raise FileNotFoundError(missing_reason())
    cmd = command(argv, tool, extra, sanitizer=exe, api_errors=api_errors)
    returncode, output, seconds = execute(cmd, child_env(env, caching), timeout, cwd)
    findings, count, warnings, notes = parse(output, tool)
    return Report(
        tool=tool, returncode=returncode, seconds=seconds, errors=findings, error_count=count,
        warning_count=warnings, notes=notes, output=output, command=cmd, timed_out=returncode is None,
    )  # fmt: skip
