"""Self-checks for exercises: the learner's grader. Run your op against its reference on many cases.

    selfcheck.run("backward kernel", lambda x, g, c: ext.backward(g, x, c, False, 1)[0],
                  reference, make_inputs, device=device)

What a wrong answer cannot get past:
* unwritten outputs: every output is poisoned with NaN first (check.poisoned), so an element the kernel
  never wrote fails, and so does a skipped tail (sizes 1, 3, 257, 1151, 65539: not multiples of a block
  or of a 16-byte pack);
* answers fitted to the check: the seed is drawn afresh on every run, and with it the random shapes and
  whatever `make_inputs` draws (values, coefficients, eps). A failure prints the seed, and
  `check(seed=N)` (or COURSE_SELFCHECK_SEED=N) replays exactly that case;
* answers that break a rule the lesson states: `special` cases, each with its own explanation (say, rows
  with a large mean for a variance formula that cancels);
* index overflow (`large_case`): a tensor of more than 2^31 elements, where the card has the memory.

A passing run prints one line and is remembered: `passed(name)` tells later cells whether to time it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import random
import re
import sys
from pathlib import Path

import torch

from . import check, env, sanitizer

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)  # every dtype the course's kernels take
SIZES = [1, 3, 8, 31, 256, 257, 1151, 4097, 65536 + 3]

_results: dict[str, bool] = {}


@dataclasses.dataclass
class Case:
    """A case the fixed sizes and random draws would not hit: `why` says what it tests, and is shown
    when it fails (for example, "rows with a large mean: mean(x^2) - mean(x)^2 cancels there")."""

    why: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    make_inputs: object  # (shape, dtype, device, generator) -> inputs
    tolerances: dict | None = None  # dict(rtol=..., atol=...) for this case, else the dtype's


def new_seed(seed: int | None = None) -> int:
    """`seed` if given, else $COURSE_SELFCHECK_SEED, else a fresh one (a different run each time)."""
    if seed is not None:
        return int(seed)
    if os.environ.get("COURSE_SELFCHECK_SEED"):
        return int(os.environ["COURSE_SELFCHECK_SEED"])
    return random.SystemRandom().randrange(1, 1 << 31)


def shapes(seed: int = 0, random_cases: int = 4) -> list[tuple[int, ...]]:
    """The awkward fixed sizes, two fixed multi-dimensional shapes, and `random_cases` shapes drawn from `seed`."""
    g = torch.Generator().manual_seed(seed)
    out = [(n,) for n in SIZES] + [(7, 129), (2, 3, 5)]
    for _ in range(random_cases):
        dims = int(torch.randint(1, 4, (1,), generator=g))
        out.append(tuple(int(v) for v in torch.randint(1, 200, (dims,), generator=g)))
    return out


class Verdicts:
    """The check of a Python exercise, one case after another: whatever the learner's code raises is a verdict,
    not a crash. `cases` counts what passed (the check adds to it)."""

    def __init__(self, name: str, file: str, hint: str, seed: int):
        self.name, self.file, self.hint, self.seed, self.cases = name, file, hint, seed, 0

    def fail(self, where: str, message: str, why: str = "") -> None:
        fail(self.name, where, message, hint=self.hint, seed=self.seed, why=why)

    def run(self, where: str, fn, why: str = ""):
        """fn() runs the learner's code and returns what it returns."""
        from . import library

        try:
            return fn()
        except Exception as e:
            if isinstance(e, NotImplementedError) and "exercise" in str(e):
                self.fail(where, f"a function in {self.file} is not written yet (it raises NotImplementedError)", why)
            self.fail(where, f"raised {library.first_lines(e, 3)}", why)

    def close(self, got, want, name: str, where: str, why: str = "", **tolerances) -> None:
        try:
            check.assert_close(got, want, name=name, **tolerances)
        except AssertionError as e:
            self.fail(where, str(e), why)


@dataclasses.dataclass
class Guarded:
    """A tensor as a view inside a larger buffer, `pad` elements of `fill` on each side (see `guarded`)."""

    view: torch.Tensor
    buffer: torch.Tensor
    pad: int
    fill: float

    def changed(self) -> tuple[int, int]:
        """How many guard elements before and after the view no longer hold `fill`."""
        n = self.view.numel()

        def count(part: torch.Tensor) -> int:
            same = part.isnan() if self.fill != self.fill else part == self.fill
            return int((~same).sum())

        return count(self.buffer[: self.pad]), count(self.buffer[self.pad + n :])

    def outside(self, what: str) -> str | None:
        """None if the guard is intact, else a sentence for a failed case: where `what` was written past."""
        before, after = self.changed()
        if not (before or after):
            return None
        return (
            f"wrote outside {what}: {after} element(s) after its end and {before} before its start changed "
            f"({what} sits inside a larger buffer here). In a kernel, the last block of threads runs partly past "
            "the end: its threads must not write."
        )


def guarded(t: torch.Tensor, pad: int, fill: float) -> Guarded:
    """t's values in a view with `pad` elements of `fill` before and after it. For an input, a kernel that reads
    past an end reads the fill (NaN, or a value that changes the result: it shows) and never memory nobody owns;
    for an output (t NaN-filled: an element never written stays NaN), a write past an end changes the guard,
    which `.changed()` / `.outside()` tell. A tensor the op allocates itself cannot be checked so: hence the
    exercises' entry points that take their output (`forward_out`, `bias_grad_into`, `grad_x=`)."""
    flat = t.reshape(-1)
    buf = torch.full((flat.numel() + 2 * pad,), fill, dtype=t.dtype, device=t.device)
    buf[pad : pad + flat.numel()] = flat
    return Guarded(buf[pad : pad + flat.numel()].view(t.shape), buf, pad, fill)


def passed(name: str) -> bool:
    """Whether the self-check `name` passed in this session (cells that time your kernel ask this)."""
    return _results.get(name, False)


@contextlib.contextmanager
def exercise(name: str):
    """Wrap an exercise's whole check (all its parts): passed(name) is True only if every part passed."""
    _results[name] = False
    yield
    _results[name] = True


def _as_tuple(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def _fail(name: str, where: str, error: AssertionError, hint: str, seed: int, why: str = "") -> None:
    msg = f"{name}: not yet. {where}:\n"
    if why:
        msg += f"This case checks {why}\n"
    msg += str(error)
    if hint:
        msg += f"\nHint: {hint}"
    msg += f"\n(Replay this run with check(seed={seed}) or COURSE_SELFCHECK_SEED={seed}.)"
    print("❌ " + msg.splitlines()[0].rstrip(":") + " (details below)")
    _results[name] = False
    raise AssertionError(msg) from None


def _compare(name, got, want, where, hint, seed, why="", tolerances=None):
    got, want = _as_tuple(got), _as_tuple(want)
    if len(got) != len(want):
        _fail(name, where, AssertionError(f"returned {len(got)} outputs, expected {len(want)}"), hint, seed, why)
    for i, (a, b) in enumerate(zip(got, want)):
        label = f"output {i}" if len(want) > 1 else "the output"
        if (
            isinstance(a, torch.Tensor)
            and a.is_floating_point()
            and a.numel() > 0
            and bool(a.isnan().all())
            and not bool(b.isnan().all())
        ):
            unwritten = f"{label} is still all NaN, as the check fills it: your code has not written it yet"
            _fail(name, where, AssertionError(unwritten), hint, seed, why)
        try:
            check.assert_close(a, b, name=f"output {i}" if len(want) > 1 else "output", **(tolerances or {}))
        except AssertionError as e:
            _fail(name, where, e, hint, seed, why)


def run(
    name: str,
    fn,
    reference,
    make_inputs,
    *,
    device=None,
    dtypes=DTYPES,
    shapes_=None,
    special: list[Case] = (),
    hint: str = "",
    tolerances: dict | None = None,
    seed: int | None = None,
) -> int:
    """fn(*inputs) and reference(*inputs) return a tensor or a tuple of tensors; make_inputs(shape, dtype,
    device, generator) returns the inputs, drawing everything random from the generator. `tolerances` maps a
    dtype to dict(rtol=..., atol=...). Runs every dtype x shape, then the `special` cases (last, so that an
    answer that writes nothing fails on a plain case, not under a rule's explanation). Returns the
    number of cases; raises AssertionError (message starting "NAME: not yet.") on the first failure."""
    device = env.default_device(device)
    seed = new_seed(seed)
    cases = 0
    for dtype in dtypes:
        for shape in shapes_ or shapes(seed):
            g = torch.Generator().manual_seed(seed + cases)
            inputs = make_inputs(shape, dtype, device, g)
            with check.poisoned():
                got = fn(*inputs)
            where = f"Case {'x'.join(map(str, shape))} {_dtype(dtype)} on {device}"
            _compare(name, got, reference(*inputs), where, hint, seed, "", (tolerances or {}).get(dtype, {}))
            cases += 1
    for case in special:
        g = torch.Generator().manual_seed(seed + cases)
        inputs = case.make_inputs(case.shape, case.dtype, device, g)
        with check.poisoned():
            got = fn(*inputs)
        where = f"Case {'x'.join(map(str, case.shape))} {_dtype(case.dtype)} on {device}"
        tol = case.tolerances or (tolerances or {}).get(case.dtype, {})
        _compare(name, got, reference(*inputs), where, hint, seed, case.why, tol)
        cases += 1
    _results[name] = True
    print(f"✅ {name}: all {cases} cases match the reference on {device} ({', '.join(map(_dtype, dtypes))}).")
    return cases


def _dtype(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def large_case(
    name: str,
    fn,
    reference,
    make_inputs,
    *,
    dtype=torch.bfloat16,
    numel: int | None = None,
    buffers: int = 3,
    hint: str = "",
    seed: int | None = None,
) -> bool:
    """Index overflow: fn on a 1-D CUDA tensor of more than 2^31 elements, compared with the reference on
    windows at the start, across element 2^31 (and 2^32) and at the end. numel=None takes 2^32 + 4099 where
    `buffers` tensors of that size fit in free GPU memory (an index computed as blockIdx.x * blockDim.x in
    32-bit unsigned arithmetic wraps only there), else 2^31 + 4099 (where a signed 32-bit index wraps); if
    not even that fits, or there is no GPU, it prints why it is skipped and returns False.
    make_inputs(numel, dtype, device, generator) returns the inputs; inputs of `numel` elements are cut into
    the windows for the reference, others are passed whole. A kernel that crashes here (a negative 32-bit
    index reads before the tensor) leaves the CUDA context unusable: the verdict says so and how to recover."""
    if not (env.cuda_mode() and torch.cuda.is_available()):
        print(f"ℹ️  {name}: the > 2^31-element case needs a GPU; skipped.")
        return False
    if sanitizing():
        print(f"ℹ️  {name}: the > 2^31-element case is left out under compute-sanitizer (it would take minutes).")
        return False
    size = torch.empty((), dtype=dtype).element_size()
    free, _ = torch.cuda.mem_get_info()
    candidates = [numel] if numel else [(1 << 32) + 4099, (1 << 31) + 4099]
    numel = next((n for n in candidates if buffers * n * size < 0.8 * free), None)
    if numel is None:
        need = buffers * candidates[-1] * size
        print(
            f"ℹ️  {name}: the > 2^31-element case needs {need / 2**30:.1f} GiB of GPU memory, "
            f"{free / 2**30:.1f} GiB are free; skipped."
        )
        return False
    seed = new_seed(seed)
    hint = hint + "; index with int64_t: blockIdx.x * int64_t(blockDim.x) + threadIdx.x"
    g = torch.Generator(device="cuda").manual_seed(seed)
    inputs = make_inputs(numel, dtype, torch.device("cuda"), g)
    try:
        with check.poisoned():
            got = _as_tuple(fn(*inputs))
        torch.cuda.synchronize()
    except RuntimeError as e:
        if "CUDA" not in str(e) and "cuda" not in str(e):
            raise
        _fail(
            name,
            f"Case {numel} {_dtype(dtype)} (past 2^31)",
            AssertionError(
                f"your kernel crashed: {str(e).splitlines()[0]}\nAn index that wraps past 2^31 (a 32-bit int) "
                "goes negative and reads before the tensor. The CUDA context is now unusable (a sticky error, "
                "lesson 00): fix the index, then restart the kernel (Kernel -> Restart) and re-run."
            ),
            hint,
            seed,
        )
    w = 4096
    starts = [0, (1 << 31) - w] + ([(1 << 32) - w] if numel > (1 << 32) else []) + [numel - 2 * w]
    for lo in starts:
        window = slice(lo, lo + 2 * w)
        cut = [t[window] if isinstance(t, torch.Tensor) and t.numel() == numel else t for t in inputs]
        mine = tuple(t[window] if t.numel() == numel else t for t in got)
        where = f"Case {numel} {_dtype(dtype)} (past 2^31), elements {lo}..{lo + 2 * w}"
        _compare(name, mine, reference(*cut), where, hint, seed)
    del inputs, got
    torch.cuda.empty_cache()
    print(f"✅ {name}: correct past element 2^{31 if numel < (1 << 32) else 32} ({numel} elements, {_dtype(dtype)}).")
    return True


def elementwise(
    exercise_name: str,
    title: str,
    fn,
    reference,
    make_inputs,
    make_large_inputs,
    *,
    buffers: int,
    device=None,
    seed: int | None = None,
    hint: str = "",
    where: tuple[str, str] = ("the CPU loop (Part 1)", "the CUDA kernel (Part 2)"),
) -> int:
    """The check of an elementwise exercise: run() on every part (the CPU part; on a GPU machine the CUDA part
    too, which must also pass large_case), recorded as `exercise_name` for passed(). Without a GPU it says
    that the CUDA part's > 2^31-element case was skipped. Returns the number of cases."""
    cases = 0
    with exercise(exercise_name):
        for dev in parts(device):
            name = f"{title}, {where[dev.type == 'cuda']}"
            cases += run(name, fn, reference, make_inputs, device=dev, seed=seed, hint=hint)
            if dev.type == "cuda":
                large_case(name, fn, reference, make_large_inputs, buffers=buffers, hint=hint, seed=seed)
        if not env.cuda_mode():
            large_case(f"{title}, {where[1]}", fn, reference, make_large_inputs, buffers=buffers, hint=hint)
    return cases


def parts(device=None) -> list[torch.device]:
    """The devices an exercise is checked on: the one asked for, else the CPU (your Part 1) and, in CUDA
    mode, the GPU too (your Part 2). Every part you wrote is checked on a GPU machine."""
    if device is not None:
        return [torch.device(device)]
    return [torch.device("cpu")] + ([torch.device("cuda")] if env.cuda_mode() else [])


def fail(name: str, where: str, message: str, *, hint: str = "", seed: int | None = None, why: str = "") -> None:
    """For checks that compare something other than tensors (an error message, say): report a failed case the
    way run() does, raising AssertionError "NAME: not yet. WHERE: ..." with the reason, hint and seed."""
    _fail(name, where, AssertionError(message), hint, new_seed(seed), why)


def passed_now(name: str, message: str) -> None:
    """For such checks: record that `name` passed and print its one line."""
    _results[name] = True
    print(f"✅ {name}: {message}")


def same_every_run(
    title: str,
    run,
    want: torch.Tensor,
    *,
    name: str,
    case: str,
    repeats: int,
    hint: str,
    seed: int,
    why: str,
    tolerances: dict | None = None,
) -> int:
    """The check for a data race, which shows in some runs only: `run()` `repeats` times, each result close to
    `want` and with the first run's bits (a fixed order of additions gives the same bits every time; a race
    does not). Fails the way run() does at the first run that differs; returns the number of runs."""
    first = None
    for k in range(repeats):
        got = run().clone()
        try:
            check.assert_close(got, want, name=name, **(tolerances or {}))
            if first is not None and not torch.equal(got, first):
                n = int((got != first).sum())
                raise AssertionError(
                    f"{name}: {n} of {got.numel()} values differ from the first run's bits: the same inputs give "
                    "other sums from one run to the next"
                )
        except AssertionError as e:
            fail(title, f"{case}, run {k + 1} of {repeats}", str(e), hint=hint, seed=seed, why=why)
        first = got if first is None else first
    print(f"✅ {title}: {repeats} runs of {case}, each matching the reference, all with the same bits.")
    return repeats


# --------------------------------------------------------------------------------------------------
# Under compute-sanitizer
# --------------------------------------------------------------------------------------------------

# What a finding means for the learner's kernel, by Finding.kind.
_ADVICE = {
    sanitizer.INVALID_ACCESS: "a thread read or wrote outside every tensor. The last block of threads runs past "
    "the end: guard the index (if (i < n)), and compute it in int64_t",
    sanitizer.HARDWARE_EXCEPTION: "the GPU stopped the kernel at an illegal or misaligned address: check the "
    "index and any pointer cast to a wider type",
    sanitizer.RACE: "two threads of a block used the same __shared__ element with no __syncthreads() between one's "
    "write and the other's access: put a barrier between the step that writes and the step that reads",
    sanitizer.UNINITIALIZED: "the kernel read memory that nothing wrote (a partial sum or a workspace element no "
    "thread filled)",
    sanitizer.BARRIER: "a __syncthreads() that only some threads of the block reach (inside an if, or a loop whose "
    "trip count differs between threads): every thread of the block must reach each barrier",
}


def kernel_files(name: str, solutions: bool | None = None) -> list[Path]:
    """An exercise's CUDA files (.cu, .cuh): the learner's in kernels/exercises/, or with solutions (default:
    COURSE_SOLUTIONS) kernels/solutions/. A glue exercise (.h) or a Python one has none."""
    solutions = env.solutions_enabled() if solutions is None else solutions
    folder = env.KERNELS / ("solutions" if solutions else "exercises")
    return sorted(p for p in folder.glob(f"{name}.*") if p.suffix in (".cu", ".cuh"))


def uses_shared_memory(name: str, solutions: bool | None = None) -> bool:
    """Whether the exercise's kernel code (comments left out) declares __shared__ memory: then racecheck has
    something to check. A learner's file counts once the answer is written (the stub has no __shared__)."""
    for path in kernel_files(name, solutions):
        code = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.S)
        if re.search(r"\b__shared__\b", code):
            return True
    return False


def sanitizer_tools(name: str, solutions: bool | None = None) -> list[str]:
    """memcheck always; racecheck too where the exercise's kernels use shared memory."""
    return ["memcheck"] + (["racecheck"] if uses_shared_memory(name, solutions) else [])


def sanitized_command(name: str, seed: int) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the child that re-runs the self-check: helpers.exercises.NAME.check on the GPU
    with `seed`, solutions or the learner's files as COURSE_SOLUTIONS says in this process, the course folder
    importable wherever the notebook runs."""
    if not name.isidentifier():
        raise ValueError(f"not an exercise name: {name!r}")
    code = f"from helpers.exercises import {name} as m; m.check(device='cuda', seed={int(seed)})"
    path = os.pathsep.join(p for p in (str(env.REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return [sys.executable, "-c", code], {
        "COURSE_SOLUTIONS": "1" if env.solutions_enabled() else "0",
        "PYTHONPATH": path,
        SANITIZING: "1",
    }


# Set in the child that sanitized() runs: the checks keep every case that reaches a new line of the learner's
# code, and leave out what only repeats or scales (the > 2^31-element case, repeated race runs), which under
# the tool's 10-100x slowdown would take minutes.
SANITIZING = "COURSE_SANITIZING"


def sanitizing() -> bool:
    """Whether this self-check runs under compute-sanitizer (in sanitized()'s child process)."""
    return os.environ.get(SANITIZING) == "1"


def sanitizable(check):
    """Decorator for an exercise's check(): adds `sanitize=False`; check(sanitize=True) first runs the check of
    the GPU part under compute-sanitizer (sanitized(), with the same seed), then the check itself."""
    name = check.__module__.rsplit(".", 1)[-1]

    @functools.wraps(check)
    def wrapper(*args, sanitize: bool = False, **kwargs):
        if sanitize:
            kwargs["seed"] = new_seed(kwargs.get("seed"))
            sanitized(name, seed=kwargs["seed"])
        return check(*args, **kwargs)

    return wrapper


def sanitized(name: str, tool: str | None = None, seed: int | None = None, timeout: float = 1200):
    """Run exercise `name`'s self-check again in a child process under compute-sanitizer: memcheck, and
    racecheck where the exercise's kernels use __shared__ (`tool` picks one). A kernel can pass every
    comparison and still read past an end or race on shared memory (the value it reads happens to be right
    on this GPU today); the sanitizer sees the access itself. Prints each report; returns the reports, or None
    (saying why) without a GPU or without compute-sanitizer. Raises AssertionError "NAME: not yet. ..." naming
    the tool and its first finding with its source line where a tool reports an error or the check fails."""
    if not env.cuda_mode():
        print(f"ℹ️  {name}: compute-sanitizer checks CUDA kernels and this is CPU mode (no GPU); skipped.")
        return None
    exe = sanitizer.find()
    if exe is None:
        print(f"ℹ️  {name}: skipped under compute-sanitizer. {sanitizer.missing_reason()}")
        return None
    seed = new_seed(seed)
    argv, child = sanitized_command(name, seed)
    reports = []
    for t in [tool] if tool else sanitizer_tools(name):
        print(f"{name}: the self-check under compute-sanitizer {t} (seed {seed}; 10-100x slower) ...", flush=True)
        report = sanitizer.run(argv, t, env=child, timeout=timeout, cwd=env.REPO_ROOT, sanitizer=exe)
        print(report.show())
        reports.append(report)
        if not report.ok:
            raise AssertionError(sanitizer_verdict(name, report, seed)) from None
    print(f"✅ {name}: compute-sanitizer {' and '.join(r.tool for r in reports)} found no errors.")
    return reports


def sanitizer_verdict(name: str, report: sanitizer.Report, seed: int) -> str:
    """The failure message of sanitized() for a report that is not ok."""
    head = f"{name}: not yet. Under compute-sanitizer {report.tool}"
    errors = [f for f in report.errors if f.severity == "error"]
    if errors:
        f = errors[0]
        msg = f"{head}, {report.summary().split(': ', 1)[1]}. The first: {f.what}"
        if f.kernel:
            msg += f"\n  in kernel {sanitizer.short(f.kernel, 90)}"
        if f.location:
            src = sanitizer.source_line(f.location)
            msg += f"\n  at {sanitizer.relative(f.location)}" + (f":  {src}" if src else "")
        if f.thread:
            msg += f"\n  by thread {sanitizer.dims(f.thread)}" + (
                f" in block {sanitizer.dims(f.block)}" if f.block else ""
            )
        if f.kind in _ADVICE:
            msg += f"\nWhat it means: {_ADVICE[f.kind]}."
    elif report.timed_out:
        msg = f"{head}, the self-check ran past {report.seconds:.0f} s and was stopped."
    elif report.returncode:
        msg = (
            f"{head}, the self-check itself failed (exit status {report.returncode}) and the tool found nothing: "
            "run the check without the sanitizer first, it says what is wrong."
        )
    else:
        msg = f"{head}, {report.summary().split(': ', 1)[1]}: the report above has the tool's lines."
    return msg + f"\n(The self-check ran with seed={seed}.)"
