"""Grading an op the way its users meet it: hidden cases in a child process, a report card and a verdict.

    python -m helpers.grade swiglu                  # your capstone op, kernels/exercises/swiglu/ (lesson 08)
    python -m helpers.grade swiglu --solution       # the course's answer, kernels/solutions/swiglu/
    python -m helpers.grade swiglu --folder DIR     # an op folder anywhere
    python -m helpers.grade swiglu --seed 1234      # replay a run's cases (the card prints its seed)
    python -m helpers.grade cross_entropy           # a practice op of lesson 09 (kernels/exercises/cross_entropy/)
    python -m helpers.grade --course                # every exercise's self-check, the capstone, the practice set
    report = grade.op(); report = grade.course()    # the same from a notebook cell

Which ops: `swiglu` (lesson 08; its checks are the check_* functions of this file) and the practice set of
lesson 09 (helpers/practice/<op>.py each: its SCHEMAS, CHECKS and check_* functions; `build`, `registered` and
`integrity` are this file's, for every op).

How it grades:
* The checks run in a child process: a crash in a kernel (a segfault, an illegal address) ends that process,
  not yours. The check it crashed in fails with the case it was running and the signal, and the checks after
  it run in a new process.
* The cases are drawn afresh every run from a seed: odd and tiny shapes, empty tensors, strided and offset
  inputs, every dtype the op claims, on every device present. An op that fits the cases of its own tests and
  nothing else fails here.
* The answer is a float64 reference computed by the grader after the op ran, from a copy of the input made
  before (an input the op changes shows as a mutation, not as a moved target). Before each call, memory the
  output may land in is filled with values that change per call, so an element the op never writes holds
  something wrong, not a value a lazy kernel could learn or a result left there by an earlier call.
* What an exploit of a timed grader would patch (the timers, synchronize, the functions the reference uses) is
  compared with torch's own after all other checks ran; each timed call gets inputs of its own; a time below
  the card's copy of the same bytes is reported as impossible, not as fast.

Each check is a function below (`check_<name>`): read them to see what a case is and what it must give.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PASS, FAIL, SKIP = "pass", "fail", "skip"
NAME = "swiglu"  # this file is also the capstone's spec: NAME, SCHEMAS, CHECKS and its check_* functions


def spec(name: str):
    """The module that says how to grade op `name`: this one for the capstone, helpers/practice/NAME.py for a
    practice op."""
    import importlib

    from . import practice

    if name == NAME:
        return sys.modules[__name__]
    if name in practice.NAMES:
        return importlib.import_module(f"helpers.practice.{name}")
    raise ValueError(f"the grader knows {', '.join([NAME, *practice.NAMES])}; not {name!r}")


def op_folder(name: str, solution: bool | None = None) -> Path:
    """kernels/exercises/NAME/ (yours) or kernels/solutions/NAME/ (with solution=True or COURSE_SOLUTIONS=1)."""
    from . import env

    solution = env.solutions_enabled() if solution is None else solution
    return env.KERNELS / ("solutions" if solution else "exercises") / name


ICONS = {PASS: "✅", FAIL: "❌", SKIP: "⏭️ "}


# --------------------------------------------------------------------------------------------------
# The report card (parent side)
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    check: str
    status: str
    detail: str = ""
    case: str | None = None
    seconds: float = 0.0


@dataclasses.dataclass
class Report:
    op: str
    folder: str
    seed: int
    results: list[Result]
    seconds: float

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results if r.status == FAIL]

    @property
    def passed(self) -> bool:
        return bool(self.results) and not self.failed

    def status(self, check: str) -> str | None:
        return next((r.status for r in self.results if r.check == check), None)

    def verdict(self) -> str:
        if self.passed:
            skipped = [r.check for r in self.results if r.status == SKIP]
            more = f" ({len(skipped)} skipped on this machine: {', '.join(skipped)})" if skipped else ""
            return f"PASS: every check passed{more}."
        names = ", ".join(r.check for r in self.failed)
        return f"NOT YET: {len(self.failed)} of {len(self.results)} checks failed ({names})."

    def card(self) -> str:
        width = max([len(r.check) for r in self.results] + [5])
        lines = [f"Report card: {self.op} ({self.folder}), seed {self.seed}, {self.seconds:.0f} s"]
        for r in self.results:
            head = f"{ICONS[r.status]} {r.check:<{width}}  {r.seconds:5.1f} s  "
            detail = r.detail.strip().splitlines() or [""]
            lines.append(head + detail[0])
            lines += [" " * (width + 14) + d for d in detail[1:]]
            if r.status == FAIL and r.case:
                lines.append(" " * (width + 14) + f"case: {r.case}")
        lines.append("")
        lines.append(self.verdict())
        if self.failed:
            lines.append(
                f"Replay these cases: python -m helpers.grade {self.op} --seed {self.seed} (add --folder/--solution as before)"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:  # op() printed the card already
        return f"<grade.Report {self.op}: {self.verdict()}>"


def _rel(p: Path) -> str:
    from . import env

    try:
        return str(Path(p).resolve().relative_to(env.REPO_ROOT))
    except ValueError:
        return str(p)


def op(
    name: str = "swiglu",
    *,
    folder: str | Path | None = None,
    solution: bool | None = None,
    seed: int | None = None,
    checks: list[str] | None = None,
    timeout: float = 1800,
    quiet: bool = False,
) -> Report:
    """Grade op `name` in `folder` (default: your folder, kernels/exercises/NAME/, or the solution's with
    solution=True or COURSE_SOLUTIONS=1): every check of its CHECKS (or those named) in a child process. Prints
    each check as it finishes and the card at the end (quiet=True prints nothing); returns the Report."""
    from . import selfcheck

    every = spec(name).CHECKS
    where = Path(folder) if folder else op_folder(name, solution)
    seed = selfcheck.new_seed(seed)
    todo = list(checks or every)
    unknown = [c for c in todo if c not in every]
    if unknown:
        raise ValueError(f"unknown checks {unknown}: the checks of {name} are {', '.join(every)}")
    if "build" not in todo:
        todo.insert(0, "build")  # every other check needs the op loaded
    results: list[Result] = []
    t0 = time.time()
    say = (lambda s: None) if quiet else (lambda s: print(s, flush=True))
    say(f"Grading {name} in {_rel(where)}/ (seed {seed}): {len(todo)} checks in a child process...")
    while todo:
        # A new child after a crash loads the op again first: its build result is the first one's, not reported twice.
        again = any(r.check == "build" for r in results)
        done, crashed, ended = _run_child(
            name, where, seed, todo if todo[0] == "build" else ["build", *todo], timeout, say
        )
        if again and done and done[0].check == "build" and done[0].status == PASS:
            done = done[1:]
        results += done + ([crashed] if crashed else [])
        finished = {r.check for r in done} | ({crashed.check} if crashed else set())
        todo = [c for c in todo if c not in finished]
        if any(r.check == "build" and r.status == FAIL for r in results):
            results += [Result(c, SKIP, "not run: the op did not build and load") for c in todo]
            break
        if todo and not finished:  # a child that cannot get through one check: report it, do not loop
            results += [Result(c, FAIL, f"the grader's child process ended before this check: {ended}") for c in todo]
            break
    report = Report(name, _rel(where), seed, results, time.time() - t0)
    say("")
    say(report.card())
    return report


def _run_child(
    name: str, where: Path, seed: int, todo: list[str], timeout: float, say
) -> tuple[list[Result], Result | None, str]:
    """One child process for `todo`: the results it reported, a failed Result for the check it was in when it
    ended (a crash, a hang), and how it ended. The child also ends itself after an error that leaves CUDA unusable
    (an illegal address): the checks after it then run in a new process."""
    from . import env

    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        events = Path(tmp) / "events.jsonl"
        cmd = [sys.executable, "-m", "helpers.grade", name, "--child", str(where), "--seed", str(seed)]
        cmd += ["--checks", ",".join(todo), "--events", str(events)]
        child_env = env.child_environ()
        child_env.pop("COURSE_SANITIZING", None)
        try:
            r = subprocess.run(cmd, cwd=env.REPO_ROOT, env=child_env, capture_output=True, text=True, timeout=timeout)
            rc, output = r.returncode, (r.stdout + r.stderr)
        except subprocess.TimeoutExpired:
            rc, output = None, ""
        lines = events.read_text().splitlines() if events.exists() else []
    done, current, case = [], None, None
    for line in lines:
        ev = json.loads(line)
        if ev["event"] == "start":
            current, case = ev["check"], None
        elif ev["event"] == "case":
            case = ev["case"]
        elif ev["event"] == "result":
            res = Result(ev["check"], ev["status"], ev.get("detail", ""), ev.get("case"), ev.get("seconds", 0.0))
            done.append(res)
            say(f"  {ICONS[res.status]} {res.check}: {(res.detail.splitlines() or [''])[0]}")
            current, case = None, None
    tail = "\n".join(output.strip().splitlines()[-6:])
    if rc is None:
        ended = f"ran past the grader's limit of {timeout:.0f} s (a hang: a kernel that never ends, a wait on a lock)"
    elif rc < 0:
        sig = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        ended = f"the process crashed ({sig}): the op must raise an error for bad input, never end the process"
    elif rc in (0, RESTART):
        ended = "it finished"
    else:
        ended = f"the process exited with status {rc}:\n{tail}"
    if current is None:
        return done, None, ended
    res = Result(current, FAIL, ended, case)
    say(f"  {ICONS[FAIL]} {current}: {ended.splitlines()[0]}")
    return done, res, ended


# --------------------------------------------------------------------------------------------------
# The checks (child side)
# --------------------------------------------------------------------------------------------------


class Fail(Exception):
    """A check's failure: the message says what was wrong; the case is the one the context last named."""


class Skip(Exception):
    """A check that does not apply on this machine (no GPU, not enough memory)."""


class Context:
    """What a check gets: the folder, the seed, the devices, a generator, and case() to name the case it runs."""

    def __init__(self, folder: Path, seed: int, events: Path, spec=None):
        import torch

        from . import env

        self.folder, self.seed, self._events = folder, seed, events
        self.spec = spec if spec is not None else sys.modules[__name__]
        self.devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and env.cuda_mode() else [])
        self.current_case: str | None = None

    def emit(self, **event) -> None:
        with open(self._events, "a") as f:
            f.write(json.dumps(event) + "\n")

    def case(self, text: str) -> None:
        self.current_case = text
        self.emit(event="case", case=text)

    def generator(self, check: str):
        import torch

        return torch.Generator().manual_seed((self.seed * 1000003 + sum(map(ord, check))) % (1 << 62))


TOLERANCES = {  # one rounding of a float (double) result to the output's dtype, and float32's own error
    "torch.float64": dict(rtol=1e-9, atol=1e-9),
    "torch.float32": dict(rtol=1e-5, atol=1e-5),
    "torch.float16": dict(rtol=1e-3, atol=1e-3),
    "torch.bfloat16": dict(rtol=8e-3, atol=8e-3),
}
DTYPES = ("float32", "float16", "bfloat16", "float64")


def _close(got, want, what: str) -> None:
    import torch

    tol = TOLERANCES[str(got.dtype)]
    try:
        torch.testing.assert_close(got.detach().double().cpu(), want.double().cpu(), **tol)
    except AssertionError as e:
        msg = str(e).strip().splitlines()
        raise Fail(f"{what} differs from the float64 reference beyond {tol}:\n" + "\n".join(msg[:6])) from None


def _close_grad(got, want, grad_y, x) -> None:
    """grad_x against the float64 gradient: the dtype's tolerance, plus the error float math makes on these
    inputs: the gate's gradient is a difference of terms of size |grad_y * up| * (1 + |gate|) (it passes through 0
    near gate = -1.28), so float's rounding there scales with them, not with the result."""
    import torch

    tol = TOLERANCES[str(got.dtype)]
    gy = grad_y.double().abs()
    gate, up = x.double().abs().chunk(2, dim=-1)
    scale = torch.cat([gy * up * (1 + gate), gy * (1 + gate)], dim=-1)
    err = (got.detach().double().cpu() - want.double()).abs()
    math_eps = 1e-12 if got.dtype == torch.float64 else 1e-6  # float math's rounding (2^-24), with a margin
    bound = tol["rtol"] * want.double().abs() + tol["atol"] + math_eps * scale
    bad = err > bound
    if bad.any():
        i = tuple(int(v) for v in (bad.nonzero()[0]))
        half = "gate" if i[-1] < x.shape[-1] // 2 else "up"
        raise Fail(
            f"grad_x differs from the float64 reference at {int(bad.sum())} of {bad.numel()} elements; the first at "
            f"{list(i)} (the {half} half): {float(got[i])} where {float(want[i])} is right (allowed: {float(bound[i]):.3g})"
        )


def _canary(numel: int, dtype, device: str, g) -> None:
    """Fill memory the op's next output is likely to get (the allocators hand back a block just freed, of the same
    size) with random values, and free it: an output element the op leaves unwritten then holds one of them."""
    import torch

    if numel == 0:
        return
    junk = torch.empty(numel, dtype=dtype, device=device)
    junk.copy_((torch.rand(numel, generator=g, dtype=torch.float64) * 2e4 - 1e4).to(dtype))
    del junk


def _rand(shape, dtype, device: str, g, *, layout: str = "contiguous", extremes: bool = True):
    """A tensor of `shape` with values ~ 3 * N(0, 1) (a few saturating values: +-40, +-100), in `layout`:
    contiguous, transposed (a view of a [2h, rows] tensor), every other column of a tensor twice as wide, or at
    an offset of one element into a larger buffer (not 16-byte aligned)."""
    import torch

    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    n = math.prod(shape)
    vals = torch.randn(n, generator=g, dtype=torch.float64) * 3
    if extremes and n >= 8:
        idx = torch.randint(0, n, (max(1, n // 50),), generator=g)
        vals[idx] = torch.tensor([40.0, -40.0, 100.0, -100.0], dtype=torch.float64).repeat(len(idx))[: len(idx)]
    vals = vals.view(shape)
    if layout == "transposed" and len(shape) >= 2:
        base = torch.empty(*shape[:-2], shape[-1], shape[-2], dtype=dtype, device=device)
        x = base.transpose(-1, -2)
    elif layout == "strided" and len(shape) >= 1:
        base = torch.empty(*shape[:-1], 2 * shape[-1], dtype=dtype, device=device)
        x = base[..., ::2]
    elif layout == "offset":
        x = torch.empty(n + 1, dtype=dtype, device=device)[1:].view(shape)
    else:
        x = torch.empty(shape, dtype=dtype, device=device)
    x.copy_(vals.to(dtype))
    return x


def _cases(g, fixed, random_count: int = 4):
    """Shapes [..., 2h]: the fixed ones, then random ones (h from 1 to 3000, odd more often than not)."""
    import torch

    shapes = list(fixed)
    for _ in range(random_count):
        rows = int(torch.randint(1, 300, (1,), generator=g))
        h = int(torch.randint(1, 3000, (1,), generator=g))
        lead = (
            (rows,)
            if int(torch.randint(0, 2, (1,), generator=g))
            else (int(torch.randint(1, 5, (1,), generator=g)), rows)
        )
        shapes.append((*lead, 2 * h))
    return shapes


SHAPES = [(1, 2), (3, 2), (5, 14), (2, 3, 2 * 1151), (1, 2 * 4099), (0, 8), (4, 0), (10,), (7, 16), (33, 128)]
LAYOUTS = ("contiguous", "transposed", "strided", "offset")


def check_build(ctx: Context) -> str:
    """The folder builds (the C++ and CUDA files as one library) and its NAME.py registers."""
    from . import capstone, loader

    name = ctx.spec.NAME
    try:
        capstone.load(ctx.folder, name=name)
    except capstone.NotReady as e:
        raise Fail(str(e)) from None
    except loader.BuildError as e:
        raise Fail("the build failed:\n" + "\n".join(str(e).strip().splitlines()[:12])) from None
    cuda = "cuda" in ctx.devices
    files = ", ".join(p.name for p in capstone.sources(ctx.folder) if cuda or p.suffix != ".cu")
    return f"built and loaded: {files}, {name}.py registered"


SCHEMAS = {
    "course::swiglu": "course::swiglu(Tensor x) -> Tensor",
    "course::swiglu_backward": "course::swiglu_backward(Tensor grad_y, Tensor x) -> Tensor",
}


def check_registered(ctx: Context) -> str:
    """Both ops exist with the task's schemas, and their CPU (and CUDA) kernels are registered from C++, not
    Python (a Python kernel that calls torch's own functions is not a kernel of yours)."""
    import torch

    for name, want in ctx.spec.SCHEMAS.items():
        ctx.case(name)
        ns, op_name = name.split("::")
        try:
            schema = str(getattr(getattr(torch.ops, ns), op_name).default._schema)
        except (AttributeError, RuntimeError):
            raise Fail(f"{name} is not registered: TORCH_LIBRARY (COURSE_LIBRARY) must define it") from None
        if schema != want:
            raise Fail(f"{name}'s schema is {schema!r}, the task's is {want!r}")
        dump = torch._C._dispatch_dump(name)
        for key in ["CPU"] + (["CUDA"] if "cuda" in ctx.devices else []):
            line = next((ln for ln in dump.splitlines() if ln.startswith(f"{key}:")), None)
            if line is None:
                raise Fail(f"{name} has no {key} kernel: register your C++ function for {key} tensors")
            where = re.search(r"registered at (\S+?):\d+", line)
            if where and where.group(1).endswith(".py"):
                raise Fail(
                    f"{name}'s {key} kernel is registered from Python ({Path(where.group(1)).name}): it must be your C++ kernel"
                )
    first, *rest = ctx.spec.SCHEMAS.values()
    others = "".join(f" and {r.split('(')[0].split('::')[1]}" for r in rest)
    return f"{first}{others}, C++ kernels for " + " and ".join(d.upper() for d in ctx.devices)


def check_forward(ctx: Context) -> str:
    """Values against the float64 reference on hidden cases: the shapes of SHAPES and random ones, each layout,
    every dtype, every device; and an input reused with new values (an op that caches outputs fails it)."""
    import torch

    from . import capstone

    g = ctx.generator("forward")
    n = 0
    for device in ctx.devices:
        for i, shape in enumerate(_cases(g, SHAPES)):
            for dtype in DTYPES:
                layout = LAYOUTS[(i + DTYPES.index(dtype)) % len(LAYOUTS)] if len(shape) >= 2 else "contiguous"
                ctx.case(f"x of shape {list(shape)}, {dtype}, {layout}, on {device}")
                x = _rand(shape, dtype, device, g, layout=layout)
                before = x.detach().cpu().clone()
                want_shape = (*shape[:-1], shape[-1] // 2)
                _canary(math.prod(want_shape), x.dtype, device, g)
                y = torch.ops.course.swiglu(x)
                if tuple(y.shape) != want_shape or y.dtype != x.dtype or y.device != x.device:
                    raise Fail(
                        f"returned {list(y.shape)} {y.dtype} on {y.device}, expected {list(want_shape)} {x.dtype} on {x.device}"
                    )
                _close(y, capstone.reference(before), "y")
                n += 1
        ctx.case(f"one input used twice, its values changed between the calls, on {device}")
        x = _rand((64, 2 * 96), "float32", device, g)
        torch.ops.course.swiglu(x)
        x.copy_(_rand((64, 2 * 96), "float32", device, g))
        _close(torch.ops.course.swiglu(x), capstone.reference(x.cpu()), "y of the second call")
    return (
        f"{n} cases ({len(DTYPES)} dtypes, {len(LAYOUTS)} layouts, on {' and '.join(ctx.devices)}) and a reused input"
    )


def check_inputs_unchanged(ctx: Context) -> str:
    """Forward and backward leave their inputs as they were, bit for bit."""
    import torch

    g = ctx.generator("inputs_unchanged")
    for device in ctx.devices:
        for dtype in ("float32", "bfloat16"):
            ctx.case(f"x [9, 2*333] {dtype} on {device}, forward and backward")
            x = _rand((9, 2 * 333), dtype, device, g)
            grad_y = _rand((9, 333), dtype, device, g)
            x0, g0 = x.clone(), grad_y.clone()
            torch.ops.course.swiglu(x)
            if not torch.equal(x, x0):
                raise Fail(f"forward changed x: {int((x != x0).sum())} of {x.numel()} values differ afterwards")
            torch.ops.course.swiglu_backward(grad_y, x)
            for name, t, t0 in (("x", x, x0), ("grad_y", grad_y, g0)):
                if not torch.equal(t, t0):
                    raise Fail(
                        f"backward changed {name}: {int((t != t0).sum())} of {t.numel()} values differ afterwards"
                    )
    return "x and grad_y bit for bit as they were, after forward and backward"


def check_backward(ctx: Context) -> str:
    """gradcheck in float64 (contiguous and transposed inputs), then every dtype's backward through autograd
    against the float64 reference's gradient, on hidden shapes and a strided grad_y."""
    import torch
    from torch.autograd.gradcheck import GradcheckError

    from . import capstone

    g = ctx.generator("backward")
    op = torch.ops.course.swiglu
    for device in ctx.devices:
        for shape, layout in (((3, 10), "contiguous"), ((2, 3, 6), "contiguous"), ((4, 2 * 7), "transposed")):
            ctx.case(f"gradcheck, x of shape {list(shape)}, float64, {layout}, on {device}")
            x = _rand(shape, "float64", device, g, layout=layout, extremes=False).requires_grad_()
            try:
                torch.autograd.gradcheck(op, (x,))
            except GradcheckError as e:
                raise Fail("gradcheck: " + "\n".join(str(e).strip().splitlines()[:8])) from None
            except RuntimeError as e:
                raise Fail(f"gradcheck could not differentiate the op: {str(e).splitlines()[0]}") from None
        for i, shape in enumerate(_cases(g, [(1, 2), (5, 2 * 37), (3, 2, 2 * 129)], random_count=2)):
            for dtype in DTYPES:
                ctx.case(f"backward, x of shape {list(shape)}, {dtype}, on {device}")
                x = _rand(shape, dtype, device, g).requires_grad_()
                hshape = (*shape[:-1], shape[-1] // 2)
                grad_y = _rand(hshape, dtype, device, g, layout="transposed" if i % 2 else "contiguous")
                before = x.detach().cpu().clone()
                y = op(x)
                if not y.requires_grad:
                    raise Fail("the output does not require grad: register the autograd formula (register_autograd)")
                _canary(x.numel(), x.dtype, device, g)
                y.backward(grad_y)
                _close_grad(x.grad, capstone.reference_grad(grad_y.cpu(), before), grad_y.cpu(), before)
    return f"gradcheck in float64 and {len(DTYPES)} dtypes' gradients against float64, on {' and '.join(ctx.devices)}"


def check_saves_only_x(ctx: Context) -> str:
    """What autograd keeps between forward and backward: x (or views of it) and nothing else; backward recomputes
    silu(gate) from x instead of keeping a [..., h] tensor alive."""
    import torch

    x = torch.randn(16, 2 * 64).requires_grad_()
    ctx.case("x [16, 2*64] float32 on cpu: the tensors saved for backward")
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        torch.ops.course.swiglu(x)
    ptr = x.untyped_storage().data_ptr()
    extra = [t for t in saved if t.untyped_storage().data_ptr() != ptr]
    if extra:
        what = ", ".join(f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}" for t in extra)
        nbytes = sum(t.numel() * t.element_size() for t in extra)
        raise Fail(
            f"autograd keeps {len(extra)} tensor(s) besides x ({what}: {nbytes} bytes): save x alone and recompute in backward"
        )
    if not saved:
        raise Fail("nothing is saved for backward: backward needs x (is the autograd formula registered?)")
    return f"saves x only ({len(saved)} tensor(s), all x's memory)"


def check_errors(ctx: Context) -> str:
    """Bad input gets an error that names the argument (a Python exception, never a crash or a result)."""
    import torch

    swiglu, backward = torch.ops.course.swiglu, torch.ops.course.swiglu_backward
    cases = [
        ("x with an odd last dimension, [3, 5]", "x", lambda d: swiglu(torch.randn(3, 5, device=d))),
        ("x of dtype int32", "x", lambda d: swiglu(torch.ones(3, 4, dtype=torch.int32, device=d))),
        ("x a 0-d tensor", "x", lambda d: swiglu(torch.tensor(1.0, device=d))),
        (
            "backward: grad_y [3, 5] for x [3, 8]",
            "grad_y",
            lambda d: backward(torch.randn(3, 5, device=d), torch.randn(3, 8, device=d)),
        ),
        (
            "backward: grad_y float64, x float32",
            "grad_y",
            lambda d: backward(torch.randn(3, 4, dtype=torch.float64, device=d), torch.randn(3, 8, device=d)),
        ),
        (
            "backward: x with an odd last dimension",
            "x",
            lambda d: backward(torch.randn(3, 2, device=d), torch.randn(3, 5, device=d)),
        ),
    ]
    if "cuda" in ctx.devices:
        cases.append(
            (
                "backward: grad_y on the CPU, x on the GPU",
                "grad_y",
                lambda d: backward(torch.randn(3, 4), torch.randn(3, 8, device="cuda")),
            )
        )
    n = 0
    for device in ctx.devices:
        for what, name, call in cases:
            ctx.case(f"{what}, on {device}")
            expect_error(what, name, lambda: call(device), device)
            n += 1
    return f"{n} bad inputs, each an error naming the argument"


def expect_error(what: str, name: str, call, device: str) -> None:
    """call() must raise an exception whose message names `name` (the argument at fault), as a word; an op that
    returns instead, or names something else, fails the check. The checks of bad input of every op use it."""
    import torch

    try:
        out = call()
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (any Python exception is a clear failure; the check reads it)
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        if not re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", str(e)):
            raise Fail(f"{what}: the error does not name {name}: {type(e).__name__}: {message}") from None
        return
    shape = [list(o.shape) for o in out] if isinstance(out, tuple) else getattr(out, "shape", type(out).__name__)
    raise Fail(f"{what}: returned {shape} instead of raising an error that names {name}")


def check_opcheck(ctx: Context) -> str:
    """torch.library.opcheck: the schema matches what the kernels do, the fake kernels match the real ones
    (shape, dtype, strides), autograd is registered where the op has inputs that need it, and the op traces."""
    import torch

    g = ctx.generator("opcheck")
    n = 0
    for device in ctx.devices:
        samples = [
            ("swiglu", (_rand((3, 10), "float32", device, g),)),
            ("swiglu", (_rand((2, 3, 2 * 9), "float32", device, g).requires_grad_(),)),
            ("swiglu", (_rand((4, 2 * 7), "bfloat16", device, g, layout="transposed"),)),
            ("swiglu_backward", (_rand((3, 5), "float32", device, g), _rand((3, 10), "float32", device, g))),
        ]
        for name, args in samples:
            desc = ", ".join(f"{list(a.shape)} {str(a.dtype).replace('torch.', '')}" for a in args)
            ctx.case(f"opcheck course::{name}({desc}) on {device}")
            try:
                torch.library.opcheck(getattr(torch.ops.course, name), args)
            except Exception as e:  # noqa: BLE001  (OpCheckError, or what the op raised inside it)
                text = str(e).replace(" (scroll up for stack trace)", "")
                raise Fail("opcheck: " + "\n".join(text.strip().splitlines()[:6])) from None
            n += 1
            _fake_matches(name, args, device)
    return f"{n} samples: schema, fake kernels (and their strides), autograd registration, traced with dynamic shapes"


def _fake_matches(name: str, args, device: str) -> None:
    """The fake kernel's output has the real one's shape, dtype and strides: torch.compile plans the memory of
    what follows from the fake's (opcheck compares shapes and dtypes, not strides)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = getattr(torch.ops.course, name)
    ins = [a.detach() for a in args]
    real = op(*ins)
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(t) for t in ins]
    with mode:
        fake = op(*fakes)
    for what, r, f in (("shape", tuple(real.shape), tuple(fake.shape)), ("strides", real.stride(), fake.stride())):
        if r != f:
            raise Fail(
                f"course::{name}'s fake kernel returns {what} {f}, the kernel {r} (on {device}): torch.compile "
                "plans the memory of what follows from the fake's"
            )
    if real.dtype != fake.dtype:
        raise Fail(f"course::{name}'s fake kernel returns {fake.dtype}, the kernel {real.dtype}")


def check_compile(ctx: Context) -> str:
    """torch.compile(fullgraph=True) of a function that uses the op, forward and backward, at two shapes: the
    same values and gradients as eager. On the CPU the tracing only (backend="aot_eager": what the fake kernels
    and the autograd formula must support, without generating C++); on a GPU the full compile."""
    import torch

    g = ctx.generator("compile")
    for device in ctx.devices:
        backend = "inductor" if device == "cuda" else "aot_eager"

        def mlp(a, w):
            return torch.ops.course.swiglu(a @ w).square().sum()

        torch._dynamo.reset()
        compiled = torch.compile(mlp, fullgraph=True, backend=backend)
        for rows, h in ((6, 10), (9, 33)):
            ctx.case(f"torch.compile(fullgraph=True, backend={backend!r}), a [{rows}, 16] @ w [16, 2*{h}], on {device}")
            a = _rand((rows, 16), "float32", device, g, extremes=False) / 3
            w = (_rand((16, 2 * h), "float32", device, g, extremes=False) / 6).requires_grad_()
            try:
                got = compiled(a, w)
                got.backward()
            except Exception as e:  # noqa: BLE001  (a graph break or a trace error: its first lines say which)
                raise Fail(
                    f"torch.compile: {type(e).__name__}: " + "\n".join(str(e).strip().splitlines()[:5])
                ) from None
            grad, w.grad = w.grad.clone(), None
            want = mlp(a, w)
            want.backward()
            try:
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                torch.testing.assert_close(grad, w.grad, rtol=1e-4, atol=1e-4)
            except AssertionError as e:
                raise Fail("compiled and eager differ: " + str(e).strip().splitlines()[0]) from None
    return "fullgraph, forward and backward, two shapes: the eager values and gradients"


def check_autocast(ctx: Context) -> str:
    """Inside torch.autocast the op gives what the native composition, silu(gate) * up, gives there: the same
    dtype (a float32 matmul's output in the autocast dtype; a float32 input stays float32) and close values."""
    import torch

    from . import capstone

    g = ctx.generator("autocast")
    n = 0
    for device in ctx.devices:
        for dtype in ("bfloat16",) if device == "cpu" else ("float16", "bfloat16"):
            ctx.case(f"torch.autocast({device!r}, dtype={dtype}): swiglu(a @ w) and swiglu(x float32)")
            a = _rand((8, 16), "float32", device, g, extremes=False)
            w = _rand((16, 2 * 24), "float32", device, g, extremes=False) / 4
            x = _rand((5, 2 * 7), "float32", device, g)
            with torch.autocast(device, dtype=getattr(torch, dtype)):
                z = a @ w
                for what, inp in (("swiglu(a @ w)", z), ("swiglu(x float32)", x)):
                    got = torch.ops.course.swiglu(inp)
                    gate, up = inp.chunk(2, dim=-1)
                    want = torch.nn.functional.silu(gate) * up
                    if got.dtype != want.dtype:
                        raise Fail(f"{what} under autocast is {got.dtype}; the native composition gives {want.dtype}")
                    _close(got, capstone.reference(inp.float()), what)
                    n += 1
    return f"{n} cases: the native composition's dtype, and its values"


def check_stream(ctx: Context) -> str:
    """The op runs on PyTorch's current stream: on a side stream, the input is written after a long sleep and the
    op called right after; an op that launches elsewhere reads the input before it is written."""
    import torch

    from . import capstone

    if "cuda" not in ctx.devices:
        raise Skip("no GPU")
    g = ctx.generator("stream")
    side = torch.cuda.Stream()
    # Warm-up: the first launch of a kernel loads its module, which waits for the whole device, and would order a
    # launch on the wrong stream after the sleep by accident.
    warm = torch.randn(4, 2 * 64, device="cuda")
    with torch.cuda.stream(side):
        torch.ops.course.swiglu_backward(torch.ops.course.swiglu(warm), warm)
    torch.cuda.synchronize()
    for what in ("forward", "backward"):
        ctx.case(f"{what} on a side stream, after torch.cuda._sleep on it")
        src = _rand((256, 2 * 1024), "float32", "cuda", g)
        gy_src = _rand((256, 1024), "float32", "cuda", g)
        x = torch.zeros_like(src)
        gy = torch.zeros_like(gy_src)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # tens of milliseconds: far longer than a launch
            x.copy_(src)
            gy.copy_(gy_src)
            out = torch.ops.course.swiglu(x) if what == "forward" else torch.ops.course.swiglu_backward(gy, x)
        side.synchronize()
        torch.cuda.synchronize()
        want = capstone.reference(src) if what == "forward" else capstone.reference_grad(gy_src.cpu(), src.cpu())
        _close(out, want, f"{what}'s output")
    return "forward and backward ordered after earlier work on the current stream"


def check_large(ctx: Context) -> str:
    """More than 2^32 elements in x (2 rows of 2 * (2^30 + 64) bfloat16 values, 8 GiB): an index computed in 32
    bits wraps there, signed or not. Needs about 16 GiB of free GPU memory."""
    import torch

    if "cuda" not in ctx.devices:
        raise Skip("no GPU")
    free, _ = torch.cuda.mem_get_info()
    h = (1 << 30) + 64
    need = (2 * 2 * h + 2 * h) * 2 * 1.3
    if free < need:
        raise Skip(f"{need / 2**30:.0f} GiB of free GPU memory needed, {free / 2**30:.0f} GiB free")
    ctx.case(f"x of shape [2, {2 * h}] bfloat16 on cuda ({2 * 2 * h} elements)")
    g = torch.Generator(device="cuda").manual_seed(ctx.seed)
    x = torch.empty(2, 2 * h, dtype=torch.bfloat16, device="cuda")
    x.uniform_(-6, 6, generator=g)
    y = torch.ops.course.swiglu(x)
    torch.cuda.synchronize()
    for r in range(2):  # the last 2^20 columns of each row, and the first ones, against the native composition
        for cols in (slice(0, 1 << 20), slice(h - (1 << 20), h)):
            gate, up = x[r, cols].float(), x[r, h:][cols].float()
            want = (torch.nn.functional.silu(gate) * up).bfloat16()
            ctx.case(f"x [2, {2 * h}] bfloat16: row {r}, columns {cols.start}..{cols.stop}")
            _close(y[r, cols], want.double(), "y")
    del x, y
    torch.cuda.empty_cache()
    return f"x [2, {2 * h}] bfloat16 ({2 * 2 * h:,} elements): both ends of each row right"


def check_speed(ctx: Context) -> str:
    """Forward and forward+backward at a LLaMA-7B MLP's shape ([8192, 2*11008]) in bfloat16 and float32, on fresh
    inputs for every timed call, against native PyTorch, torch.compile and Liger-Kernel (where installed), as %
    of a copy of the same bytes. A time well below the copy's (IMPOSSIBLE_PCT) is impossible and fails the check."""
    import torch

    from . import bench

    if "cuda" not in ctx.devices:
        raise Skip("no GPU: timings need one")
    rows, h = 8192, 11008
    lines, impossible = [], []
    liger = _liger()

    def native(x):
        gate, up = x.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up

    compiled = torch.compile(native)
    for dtype in (torch.bfloat16, torch.float32):
        xs = [torch.randn(rows, 2 * h, dtype=dtype, device="cuda") for _ in range(3)]
        gys = [torch.randn(rows, h, dtype=dtype, device="cuda") for _ in range(3)]
        halves = [tuple(t.contiguous() for t in x.chunk(2, dim=-1)) for x in xs] if liger else []
        k = [0]

        def fresh():  # each timed call takes the next of 3 inputs: a result cached by input cannot be replayed
            k[0] = (k[0] + 1) % 3
            return k[0]

        def fwd(fn):
            return lambda: fn(xs[fresh()])

        def fwd_bwd(fn):
            def run():
                i = fresh()
                x = xs[i].detach().requires_grad_()
                fn(x).backward(gys[i])

            return run

        esize = xs[0].element_size()
        for what, nbytes, wrap in (
            ("forward", 3 * rows * h * esize, fwd),
            ("forward+backward", 8 * rows * h * esize, fwd_bwd),
        ):
            ctx.case(f"{what}, [{rows}, 2*{h}] {str(dtype).replace('torch.', '')}")
            fns = {"yours": wrap(torch.ops.course.swiglu), "native": wrap(native), "torch.compile": wrap(compiled)}
            if liger:
                if what == "forward":
                    fns["Liger-Kernel"] = lambda: liger.apply(*halves[fresh()])
                else:

                    def liger_fb():
                        i = fresh()
                        a, b = (t.detach().requires_grad_() for t in halves[i])
                        liger.apply(a, b).backward(gys[i])

                    fns["Liger-Kernel"] = liger_fb
            res = {r["impl"]: r for r in bench.compare(fns, nbytes=nbytes, device="cuda")}
            ours = res["yours"]
            best = min((r["ms"], name) for name, r in res.items() if name != "yours")
            lines.append(
                f"{what:<16} {str(dtype).replace('torch.', ''):<8} {ours['ms']:.3f} ms, {ours['pct_copy']:.0f} % of a copy; "
                + ", ".join(f"{name} {r['ms'] / ours['ms']:.2f}x" for name, r in res.items() if name != "yours")
                + f" (best of them: {best[1]})"
            )
            if ours["pct_copy"] > IMPOSSIBLE_PCT:
                impossible.append(f"{what} {dtype}: {ours['pct_copy']:.0f} % of a copy of the same bytes")
    text = "times as ratios: theirs / yours (above 1: yours is faster)\n" + "\n".join(lines)
    if impossible:
        raise Fail(
            "impossible: faster than a copy of the bytes the op must move (is work skipped, cached, or on "
            "another stream?):\n" + "\n".join(impossible) + "\n" + text
        )
    return text


# % of a copy of the same bytes above which a time is impossible, not fast: a pass that reads more than it writes
# can beat a copy's GB/s by a few percent; skipped work beats it by far more.
IMPOSSIBLE_PCT = 115


def _liger():
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except Exception:  # noqa: BLE001  (not installed, or no Triton here)
        return None
    return LigerSiLUMulFunction


# What an exploit of a grader patches: these must be the objects they were before the op's code loaded.
WATCHED = (
    "time.perf_counter",
    "time.time",
    "torch.cuda.synchronize",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
    "torch.testing.assert_close",
    "torch.equal",
    "torch.nn.functional.silu",
    "torch.sigmoid",
    "torch.exp",
    "torch.Tensor.double",
    "torch.Tensor.clone",
    "torch.Tensor.copy_",
    "torch.autograd.gradcheck",
    "torch.library.opcheck",
    "torch.utils.benchmark.Timer.blocked_autorange",
)


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(dotted)


def _watched() -> dict[str, object]:
    found = {}
    for name in WATCHED:
        try:
            found[name] = _resolve(name)
        except (ImportError, AttributeError):
            pass
    return found


def check_integrity(ctx: Context) -> str:
    """After every other check ran: the timers, synchronize, and the functions the reference and the checks use are
    still torch's own (an op's code that replaces one of them could pass any check)."""
    ctx.case("the functions the grader uses, compared with those before the op's code loaded")
    now = _watched()
    changed = [n for n, obj in ORIGINAL.items() if now.get(n) is not obj]
    if changed:
        raise Fail("replaced after the op's code loaded: " + ", ".join(changed))
    return f"{len(ORIGINAL)} functions the grader relies on are torch's own"


# An error after which CUDA calls in this process keep failing (a sticky error): the child ends itself.
_CUDA_BROKEN = re.compile(
    r"illegal (memory access|address|instruction)|unspecified launch failure|device-side assert|misaligned address",
    re.I,
)
RESTART = 3

CHECKS = [
    "build",
    "registered",
    "forward",
    "inputs_unchanged",
    "backward",
    "saves_only_x",
    "errors",
    "opcheck",
    "compile",
    "autocast",
    "stream",
    "large",
    "speed",
    "integrity",
]
ORIGINAL: dict[str, object] = {}


# The checks every op gets from this file; an op's spec module defines the others.
GENERIC = ("build", "registered", "integrity")


def _check_function(op_spec, name: str):
    if name in GENERIC:
        return globals()[f"check_{name}"]
    return getattr(op_spec, f"check_{name}")


def _child(op_name: str, folder: Path, seed: int, checks: list[str], events: Path) -> int:
    ORIGINAL.update(_watched())  # before anything of the op's loads
    import torch

    from . import env

    env.bootstrap(quiet=True)
    op_spec = spec(op_name)
    ctx = Context(folder, seed, events, op_spec)
    for name in checks:
        ctx.emit(event="start", check=name)
        ctx.current_case = None
        torch.manual_seed(seed)
        t0 = time.time()
        try:
            detail, status = _check_function(op_spec, name)(ctx), PASS
        except Fail as e:
            detail, status = str(e), FAIL
        except Skip as e:
            detail, status = str(e), SKIP
        except Exception as e:  # noqa: BLE001  (an error the check did not expect is the op's failure too)
            lines = str(e).strip().splitlines() or [""]
            detail, status = f"{type(e).__name__}: " + "\n".join(lines[:6]), FAIL
        ctx.emit(
            event="result",
            check=name,
            status=status,
            detail=detail,
            case=ctx.current_case if status == FAIL else None,
            seconds=time.time() - t0,
        )
        if name == "build" and status == FAIL:
            break
    return 0


# --------------------------------------------------------------------------------------------------
# The whole course: every exercise's self-check, and the capstone
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Progress:
    rows: list[tuple[str, str, str]]  # (exercise, status, first line)

    def table(self) -> str:
        width = max(len(r[0]) for r in self.rows)
        done = sum(r[1] == PASS for r in self.rows)
        lines = [f"{ICONS[s]} {name:<{width}}  {line}" for name, s, line in self.rows]
        return "\n".join(lines + ["", f"{done} of {len(self.rows)} done."])

    def __repr__(self) -> str:  # course() printed the table already
        done = sum(r[1] == PASS for r in self.rows)
        return f"<grade.Progress: {done} of {len(self.rows)} done>"


def course(
    names: list[str] | None = None,
    *,
    capstone: bool = True,
    practice: bool = True,
    timeout: float = 1800,
    quiet: bool = False,
) -> Progress:
    """Every exercise's self-check on your files (each in a child process, on this machine's devices), then the
    capstone's grade and each practice op's: a progress table. names: only these exercises."""
    from . import env, exercises

    say = (lambda s: None) if quiet else (lambda s: print(s, flush=True))
    rows = []
    for name in names if names is not None else exercises.names():
        code = f"from helpers import env, exercises; env.bootstrap(quiet=True); exercises.module({name!r}).check()"
        try:
            r = subprocess.run(
                [sys.executable, "-c", code],
                cwd=env.REPO_ROOT,
                env=env.child_environ(),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            out = (r.stdout + r.stderr).strip().splitlines()
            if r.returncode == 0:
                status, line = PASS, next((ln for ln in reversed(out) if ln.startswith("✅")), "passed")
            else:
                status = FAIL
                line = next((ln for ln in out if ln.startswith("❌")), None)
                if line is None:
                    line = (
                        f"crashed ({signal.Signals(-r.returncode).name})"
                        if r.returncode < 0
                        else (out[-1] if out else "failed")
                    )
        except subprocess.TimeoutExpired:
            status, line = FAIL, f"ran past {timeout:.0f} s"
        rows.append((name, status, line.lstrip("✅❌ ").strip()))
        say(f"{ICONS[status]} {name}: {rows[-1][2]}")
    from . import practice as practice_set

    graded = ([NAME] if capstone else []) + (list(practice_set.NAMES) if practice else [])
    for name in graded:
        report = op(name, quiet=True, timeout=timeout)
        label = f"capstone: {name}" if name == NAME else f"practice: {name}"
        rows.append((label, PASS if report.passed else FAIL, report.verdict()))
        say(f"{ICONS[rows[-1][1]]} {label}: {report.verdict()}")
    progress = Progress(rows)
    say("")
    say(progress.table())
    return progress


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m helpers.grade", description=__doc__.split("\n\n")[0])
    p.add_argument("op", nargs="?", default=NAME, help="swiglu (lesson 08) or a practice op of lesson 09")
    p.add_argument("--folder", help="the op folder to grade (default: yours, kernels/exercises/OP/)")
    p.add_argument("--solution", action="store_true", help="grade the course's answer")
    p.add_argument("--seed", type=int)
    p.add_argument("--checks", help="comma-separated: only these checks (swiglu's: " + ", ".join(CHECKS) + ")")
    p.add_argument("--course", action="store_true", help="every exercise's self-check and the capstone")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--events", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    checks = a.checks.split(",") if a.checks else None
    if a.child:
        return _child(a.op, Path(a.child), a.seed, checks or spec(a.op).CHECKS, Path(a.events))
    if a.course:
        return 0 if all(s == PASS for _, s, _ in course().rows) else 1
    report = op(a.op, folder=a.folder, solution=True if a.solution else None, seed=a.seed, checks=checks)
    return 0 if report.passed else 1


if __name__ == "__main__":
    # Run as helpers.grade, not as __main__: a spec module's `from helpers.grade import Fail, Skip` must name the
    # classes the child catches.
    from helpers import grade

    sys.exit(grade.main())
