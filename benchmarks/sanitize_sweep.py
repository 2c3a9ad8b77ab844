"""The course's kernels under compute-sanitizer's four tools (lesson 07), on small inputs (make test-gpu-sanitize).

    python -m benchmarks.sanitize_sweep --out out/sanitize                   # every tool x every op
    python -m benchmarks.sanitize_sweep --tools memcheck --ops rmsnorm,dropout --out out/sanitize
    python -m benchmarks.sanitize_sweep --driver layernorm                   # one op's cases, no sanitizer
    python -m benchmarks.sanitize_sweep --driver layernorm --list            # its cases (no GPU needed)

A driver (--driver OP) runs one op of helpers/ops on the GPU: every version its lesson runs, every dtype it
takes, forward and backward through autograd, on shapes chosen so that each path of the op's dispatch runs once
(the norm engine's table in kernels/norm_engine/engine.cuh, layernorm.route.cu's; Hopper's clusters and bulk
copies where the GPU is sm_90 or newer). The shapes are as small as each path allows: the tools slow a kernel
10-100x, and a path is the same code at 10 rows as at 10 000 (where a path needs many rows, the count comes from
the GPU's size). It prints each case before running it, so a finding's `context` names the case.

The sweep runs each driver once without the sanitizer (that builds the extensions and shows a driver that fails
on its own as such), then each tool x op in a child process under helpers.sanitizer.run, several at once
(--jobs), with the solutions built (COURSE_SOLUTIONS=1). It prints a table (tool x op: errors, seconds) and each
failing report, writes OUT/sanitize.json and each run's full output to OUT/<tool>-<op>.log, and exits 1 where
any report has an error, a child failed or the tool is missing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from helpers import env, sanitizer
from helpers.ops import add_norm as an
from helpers.ops import dropout as dr
from helpers.ops import fused_bias_relu as fbr
from helpers.ops import layernorm as ln
from helpers.ops import norm_dropout as ndr
from helpers.ops import polynomial as poly
from helpers.ops import rmsnorm as rms

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
DTYPES = (F32, F64, F16, BF16)
EPS, SCALE, P = 1e-5, 1.75, 0.3
DEVICE = "cuda"  # where drive() runs the cases ("cpu": the same calls on the CPU implementations)


@dataclasses.dataclass(frozen=True)
class Device:
    """What the shapes depend on: the architecture (90: sm_90), SMs and threads per SM (waves of rows)."""

    arch: int = 90
    sms: int = 132
    threads_per_sm: int = 2048

    @staticmethod
    def here() -> Device:
        p = torch.cuda.get_device_properties(0)
        return Device(
            p.major * 10 + p.minor, p.multi_processor_count, getattr(p, "max_threads_per_multi_processor", 2048)
        )


@dataclasses.dataclass(frozen=True)
class Case:
    """One run of an op: `variant` (a version, a kernel choice, the registered op), a dtype, the shapes it runs
    one after another, element offsets of its inputs (1: a pointer off 16 bytes, the scalar paths), the path the
    shape is there for, and the oldest architecture that has that path."""

    variant: str
    dtype: torch.dtype
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...] = (0,)
    path: str = ""
    min_arch: int = 0

    def label(self) -> str:
        shapes = ", ".join("x".join(map(str, s)) for s in self.shapes)
        off = " (also misaligned)" if 1 in self.offsets else ""
        return f"{self.variant} {str(self.dtype).replace('torch.', '')} {shapes}{off}" + (
            f": {self.path}" if self.path else ""
        )


# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------


def _tensor(shape, dtype, seed=0, offset=0, grad=False) -> torch.Tensor:
    """Random values on the GPU, `offset` elements into a fresh buffer (offset 1: not 16-byte aligned)."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    n = math.prod(shape)
    flat = torch.randn(n + offset, generator=g, device=DEVICE).to(dtype)
    return flat[offset:].view(shape).detach().requires_grad_(grad)


def _inputs(case: Case):
    """x for each shape and offset of the case, differentiable."""
    for shape in case.shapes:
        for offset in case.offsets:
            yield _tensor(shape, case.dtype, 0, offset, grad=True)


def _backward(outs) -> None:
    """Backward through autograd from random gradients of every output."""
    outs = [o for o in (outs if isinstance(outs, (tuple, list)) else (outs,)) if o.requires_grad]
    torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])


def _params(n, dtype):
    """A norm's weight and bias, differentiable."""
    return _tensor((n,), dtype, 1, grad=True), _tensor((n,), dtype, 2, grad=True)


# --------------------------------------------------------------------------------------------------
# The ops: cases(dev) and run(case)
# --------------------------------------------------------------------------------------------------

ELEMENTWISE = ((1,), (1151,), (65539,), (7, 129))


def polynomial_cases(dev: Device) -> list[Case]:
    return [Case(v, dt, ELEMENTWISE, (0, 1)) for v in ("op", "v1", "v2") for dt in DTYPES]


def polynomial_run(case: Case) -> None:
    version = None if case.variant == "op" else int(case.variant[1:])
    for x in _inputs(case):
        # backward v1 (the exercise's kernel) computes grad_x only
        coeffs = torch.tensor([0.5, -1.0, 2.0, 0.25], device=DEVICE, dtype=case.dtype, requires_grad=version != 1)
        _backward(poly.polynomial(x, coeffs, version=version))


FBR_SHAPES = ((3, 5), (17, 64), (300, 256))
FBR_VARIANTS = [f"save={s}" for s in fbr.SAVES] + ["in place", "forward v1", "forward v2", "forward v3"]
FBR_VARIANTS += ["backward v1", "backward v2"] + [f"backward from y v{v}" for v in (1, 2, 3, 4)]
FBR_VARIANTS += ["backward from bits v1", "backward from bits v2", "backward from mask v1", "backward from mask v2"]
FBR_VARIANTS += ["bias grad v3", "bias grad v4"]


def fused_bias_relu_cases(dev: Device) -> list[Case]:
    return [Case(v, dt, FBR_SHAPES, (0, 1)) for v in FBR_VARIANTS for dt in DTYPES]


def fused_bias_relu_run(case: Case) -> None:
    ext = fbr.extension("fused_bias_relu")
    kind, _, v = case.variant.rpartition(" v")
    kind, v = (kind, int(v)) if v.isdigit() else (case.variant, 0)
    for x in _inputs(case):
        b = _tensor(x.shape[-1:], case.dtype, 1, grad=True)
        gy = torch.randn_like(x)
        xd, bd = x.detach(), b.detach()
        if kind.startswith("save="):
            _backward(fbr.fused_bias_relu(x, b, SCALE, save=kind[5:]))
        elif kind == "in place":
            _backward(fbr.fused_bias_relu_(x.clone(), b, SCALE))
        elif kind == "forward":
            ext.forward(xd, bd, SCALE, v)
        elif kind == "backward":
            ext.backward(gy, xd, bd, SCALE, True, v)
        elif kind == "backward from y":
            ext.backward_from_mask(gy, ext.forward(xd, bd, SCALE), SCALE, True, v)
        elif kind == "backward from bits":
            ext.backward_from_mask(gy, ext.forward_bits(xd, bd, SCALE)[1], SCALE, True, v)
        elif kind == "backward from mask":
            ext.backward_from_mask(gy, ext.forward_mask(xd, bd, SCALE)[1], SCALE, True, v)
        else:  # bias grad: grad_bias alone by backward v3's or v4's pass
            ext.bias_grad_into(gy, ext.forward(xd, bd, SCALE), torch.empty_like(bd), v)


def dropout_cases(dev: Device) -> list[Case]:
    return [Case(v, dt, ELEMENTWISE, (0, 1)) for v in ("op", "op p=0", "op p=1", "v1", "v2") for dt in DTYPES]


def dropout_run(case: Case) -> None:
    ext = dr.extension("dropout")
    for x in _inputs(case):
        if case.variant.startswith("op"):
            p = float(case.variant.split("=")[1]) if "=" in case.variant else P
            _backward(dr.dropout(x, p))
        else:
            y, rng = ext.forward(x.detach(), P, True, int(case.variant[1:]))
            ext.backward(torch.randn_like(y), rng, P, int(case.variant[1:]))


SMALL_ROWS = ((4, 1024), (3, 1151), (2, 3, 33))  # 16-byte packs; one value per pack; 3-D, a short odd row


def _short_rows(dev: Device) -> int:
    """Rows of 256 whose one-row-per-group grid is more than 1.5 waves of full SMs: the engine's forward puts
    2 or 4 rows in a row group (forward_short_rows, 32 threads per row)."""
    return math.ceil(1.5 * dev.sms * dev.threads_per_sm / 32) + 64


def _engine_forward(dev: Device) -> list[Case]:
    """One case per row of engine.cuh's forward table, named by the engine kernel the shape takes (course::
    layer_norm's route sends some of them to lesson 03's ladder instead: its driver prints the route)."""
    return [
        Case("op", BF16, ((dev.sms + 8, 16384),), path="forward_bulk_kernel, more rows than clusters", min_arch=90),
        Case("op", F32, ((2, 65536),), path="forward_bulk_kernel, float rows too long for registers", min_arch=90),
        Case("op", BF16, ((2, 65536),), path="forward_bulk_kernel, 2-byte rows in a small batch", min_arch=90),
        Case("op", F32, ((_short_rows(dev), 256),), path="forward_kernel, 2 short rows per row group"),
        Case("op", BF16, ((_short_rows(dev), 256),), path="forward_kernel, 4 short rows per row group"),
        Case("op", F32, ((16 * dev.sms + 64, 1024),), path="forward_kernel, 16 values a thread, several waves"),
        Case("op", F32, ((2, 32768),), path="forward_kernel, 32 values a thread"),
        Case("op", BF16, ((2, 32768),), path="forward_kernel, 32 values a thread (too few rows for bulk)"),
        Case("op", F32, ((3, 20001),), path="forward_long_kernel, the row in one block's shared memory"),
        Case("op", F32, ((2, 65537),), path="forward_long_kernel over a cluster (elsewhere: read again)"),
        Case("op", F32, ((1, 500001),), path="forward_long_kernel, too long for a cluster: read again", min_arch=90),
        Case("op", F64, ((2, 40000),), path="forward_long_kernel over a cluster, float64 (elsewhere: read again)"),
    ]


def _engine_backward(dev: Device) -> list[Case]:
    """One case per row of engine.cuh's backward table."""
    return [
        Case("op", BF16, ((4, 16384),), path="backward_bulk_kernel, 2-byte rows", min_arch=90),
        Case("op", BF16, ((dev.sms + 4, 16384),), path="backward_bulk_kernel, the ring reused", min_arch=90),
        Case("op", F32, ((4, 16384),), path="backward_bulk_kernel, float rows too long for registers", min_arch=90),
        Case("op", F64, ((4, 16384),), path="backward_kernel over a cluster of 2 (elsewhere: 16 values)"),
        Case("op", BF16, ((4, 12288),), path="backward_kernel, 16 values a thread"),
        Case("op", F32, ((3, 20001),), path="backward_long_rows_kernel + backward_long_cols_kernel"),
        Case("op", BF16, ((2, 65536),), path="backward_bulk_kernel over a cluster of 8", min_arch=90),
    ]


def rmsnorm_cases(dev: Device) -> list[Case]:
    out = [Case(v, dt, SMALL_ROWS, (0, 1)) for v in ("op", "v1", "v2") for dt in DTYPES]
    out += _engine_forward(dev) + _engine_backward(dev)
    out += [
        Case("op", BF16, ((72, 8192),), path="backward_v2_bulk_kernel<kRms>, rounds of rows", min_arch=90),
        Case("op", F32, ((72, 4096),), path="backward_v2_bulk_kernel<kRms>, float rounds", min_arch=90),
        Case("op float32 weight", BF16, ((4, 1024), (72, 8192)), path="float32 weight beside 2-byte x"),
        Case("op no weight", F32, ((4, 1024),)),
    ]
    return out


def rmsnorm_run(case: Case) -> None:
    version = None if case.variant.startswith("op") else int(case.variant[1:])
    for x in _inputs(case):
        n = x.shape[-1]
        w = (
            None
            if "no weight" in case.variant
            else _tensor((n,), F32 if "float32" in case.variant else x.dtype, 1, grad=True)
        )
        _backward(rms.rms_norm(x, (n,), w, None, version=version))


LADDER_SHAPES = ((4, 3), (5, 1024), (3, 1151), (2, 8192), (2, 16384))


def layernorm_cases(dev: Device) -> list[Case]:
    out = [Case(v, dt, LADDER_SHAPES) for v in ("v1", "v2", "v3") for dt in DTYPES]
    out += [
        Case("v3 and v2 kernels", dt, (s,), path="forward v3 and backward v2, every kernel by name")
        for dt in (BF16, F16, F32)
        for s in ((64, 1024), (8, 8192), (3, 24576))
    ]
    out += [Case("op", dt, SMALL_ROWS, (0, 1)) for dt in DTYPES]
    out += _engine_forward(dev) + _engine_backward(dev)
    out += [
        Case("op", BF16, ((4, 4096),), path="route: the engine's forward, 2-byte rows over 2048"),
        Case("op", F32, ((4, 1024),), path="route: the engine's forward in one wave"),
        Case("op", BF16, ((8 * dev.sms + 64, 2048),), path="route: ladder forward v3 and backward v2, kAuto"),
        Case("op", F64, ((4, 1024), (2, 16384)), path="route: float64 always takes the ladder"),
        Case("op float32 weight", BF16, ((4, 1024),), path="float32 weight and bias beside 2-byte x"),
        Case("op no weight", F32, ((4, 1024),)),
        Case("op 2-d normalized", F32, ((3, 4, 8),)),
    ]
    return out


def layernorm_run(case: Case) -> None:
    ext = ln.extension("layernorm")
    for x in _inputs(case):
        n = x.shape[-1]
        w, b = _params(n, F32 if "float32" in case.variant else x.dtype)
        if case.variant == "v3 and v2 kernels":
            xd, wd, bd, gy = x.detach(), w.detach(), b.detach(), torch.randn_like(x)
            for kernel in ("registers", "pipelined"):
                ext.forward(xd, wd, bd, EPS, 3, kernel)
            _, mean, rstd = ext.forward(xd, wd, bd, EPS, 3)
            for kernel in ("two_kernels", "cooperative", "bulk_copy", "bulk_copy_split_barrier"):
                ext.backward(gy, xd, mean, rstd, wd, 2, kernel)
        elif case.variant.startswith("v"):
            _backward(ln.layer_norm(x, w, b, EPS, version=int(case.variant[1:])))
        elif case.variant == "op 2-d normalized":
            w2, b2 = (t.detach().reshape(1, n).expand(4, n).contiguous().requires_grad_() for t in (w, b))
            _backward(ln.layer_norm_like_native(x, (4, n), w2, b2, EPS))
        else:
            keep = "no weight" not in case.variant
            _backward(ln.layer_norm(x, w if keep else None, b if keep else None, EPS))


def layernorm_route(case: Case) -> str:
    """What course::layer_norm's route (layernorm.route.cu) runs for the case's 2-D shapes, forward; backward."""
    if not case.variant.startswith("op") or DEVICE != "cuda":
        return ""
    ext = ln.extension("layernorm")
    xs = [torch.empty(s, dtype=case.dtype, device="cuda") for s in case.shapes if len(s) == 2]
    return " | ".join(f"{ext.describe(x, 'forward')}; {ext.describe(x, 'backward')}" for x in xs)


def add_norm_cases(dev: Device) -> list[Case]:
    out = [Case(v, dt, SMALL_ROWS, (0, 1)) for v in ("rms", "layer") for dt in DTYPES]
    shapes = [  # the fused add never takes the forward's bulk kernel while a row fits in registers
        (BF16, (4, 16384), "forward_kernel; backward_bulk_kernel (sm_90)"),
        (F32, (4, 16384), "forward_kernel; backward_bulk_kernel (sm_90)"),
        (F32, (2, 65536), "forward_bulk_kernel and backward_bulk_kernel (sm_90), float"),
        (BF16, (2, 65536), "forward_bulk_kernel, small batch; backward over a cluster of 8 (sm_90)"),
        (F32, (3, 20001), "forward_long_kernel; the long-row backward pair"),
        (F32, (2, 65537), "forward_long_kernel over a cluster (sm_90)"),
        (F64, (4, 16384), "backward_kernel over a cluster of 2 (sm_90)"),
        (BF16, (4, 12288), "backward_kernel, 16 values a thread"),
    ]
    return out + [Case(v, dt, (s,), path=p) for dt, s, p in shapes for v in ("rms", "layer")]


def add_norm_run(case: Case) -> None:
    for x in _inputs(case):
        n = x.shape[-1]
        residual = _tensor(x.shape, x.dtype, 3, grad=True)
        w, b = _params(n, x.dtype)
        if case.variant == "rms":
            _backward(an.add_rms_norm(x, residual, (n,), w))
        else:
            _backward(an.add_layer_norm(x, residual, (n,), w, b, EPS))


def norm_dropout_cases(dev: Device) -> list[Case]:
    out = [Case("all", dt, SMALL_ROWS, (0, 1)) for dt in DTYPES]
    return out + [
        Case("all", F32, ((2, 32768),), path="forward_kernel, 32 values a thread; backward v2 falls back to v1"),
        Case("all", F32, ((2, 40000),), path="forward_long_kernel, the row kept in shared memory"),
        Case("all", F32, ((2, 65536),), path="forward_long_kernel, the row read again"),
        Case("all", BF16, ((2, 65536),), path="forward_long_kernel, a 2-byte row in shared memory"),
        Case("all", F64, ((4, 8192),), path="float64 rows in blocks of at most 512 threads"),
    ]


def norm_dropout_run(case: Case) -> None:
    """The op (train and eval) through autograd, and the module's forward v1 with backward v1 and v2."""
    ext = ndr.extension("norm_dropout")
    for x in _inputs(case):
        n = x.shape[-1]
        w = _tensor((n,), x.dtype, 1, grad=True)
        _backward(ndr.rms_norm_dropout(x, (n,), w, None, P))
        _backward(ndr.rms_norm_dropout(x, (n,), w, None, P, train=False))
        y, rstd, rng = ext.forward(x.detach(), w.detach(), None, P, True, 1)
        for version in (1, 2):
            ext.backward(torch.randn_like(y), x.detach(), rstd, w.detach(), rng, P, version)


DRIVERS: dict[str, tuple[Callable[[Device], list[Case]], Callable[[Case], None]]] = {
    "add_norm": (add_norm_cases, add_norm_run),
    "dropout": (dropout_cases, dropout_run),
    "fused_bias_relu": (fused_bias_relu_cases, fused_bias_relu_run),
    "layernorm": (layernorm_cases, layernorm_run),
    "norm_dropout": (norm_dropout_cases, norm_dropout_run),
    "polynomial": (polynomial_cases, polynomial_run),
    "rmsnorm": (rmsnorm_cases, rmsnorm_run),
}


# Where the kernels a case runs depend on a route, the driver names it beside the case (on the GPU).
ROUTES: dict[str, Callable[[Case], str]] = {"layernorm": layernorm_route}


def cases(op: str, dev: Device) -> list[Case]:
    """The op's cases on a GPU like `dev`: those of a newer architecture left out."""
    return [c for c in DRIVERS[op][0](dev) if c.min_arch <= dev.arch]


def drive(op: str, dev: Device | None = None, list_only: bool = False, device: str = "cuda") -> int:
    """Run (or list) every case of `op`, each printed before it runs; the first failure raises. device="cpu"
    makes the same calls on the CPU implementations (a check of the driver itself where there is no GPU)."""
    global DEVICE
    DEVICE = device
    dev = dev or (Device.here() if device == "cuda" else Device(arch=0))
    todo = cases(op, dev)
    for i, case in enumerate(todo, 1):
        route = "" if list_only or op not in ROUTES else ROUTES[op](case)
        print(f"case {i}/{len(todo)}: {op} {case.label()}" + (f" [route: {route}]" if route else ""), flush=True)
        if not list_only:
            DRIVERS[op][1](case)
            if device == "cuda":
                torch.cuda.synchronize()
    if not list_only:
        print(f"{op}: all {len(todo)} cases ran", flush=True)
    return 0


# --------------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------------


# Children at a time: each keeps a CPU core busy with the tool's own work beside its program's.
JOBS = max(1, min(8, (os.cpu_count() or 2) // 2))


def driver_argv(op: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.sanitize_sweep", "--driver", op]


@dataclasses.dataclass
class Result:
    op: str
    tool: str  # "plain": the driver alone
    ok: bool
    errors: int | None
    warnings: int
    seconds: float
    returncode: int | None
    report: sanitizer.Report | None = None


def run_sweep(
    tools, ops, out: Path, *, jobs: int = JOBS, timeout: float = 600, argv_of=driver_argv, exe=None
) -> list[Result]:
    """Every op's driver alone, then under every tool, `jobs` child processes at a time. Writes the logs and
    OUT/sanitize.json; returns the results (plain runs first)."""
    out.mkdir(parents=True, exist_ok=True)
    child = {"COURSE_SOLUTIONS": "1", "PYTHONPATH": str(env.REPO_ROOT)}

    def plain(op: str) -> Result:
        rc, text, secs = sanitizer.execute(argv_of(op), sanitizer.child_env(child), timeout, env.REPO_ROOT)
        (out / f"plain-{op}.log").write_text(text)
        return Result(op, "plain", rc == 0, None, 0, secs, rc)

    def checked(job: tuple[str, str]) -> Result:
        op, tool = job
        r = sanitizer.run(argv_of(op), tool, env=child, timeout=timeout, cwd=env.REPO_ROOT, sanitizer=exe)
        (out / f"{tool}-{op}.log").write_text(r.output)
        return Result(op, tool, r.ok, r.error_count, r.warning_count, r.seconds, r.returncode, r)

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(plain, ops))
        fine = [r.op for r in results if r.ok]
        results += list(pool.map(checked, [(op, tool) for op in fine for tool in tools]))
    (out / "sanitize.json").write_text(json.dumps(_as_json(results), indent=1))
    return results


def _as_json(results: list[Result]) -> dict:
    def row(r: Result) -> dict:
        d = {k: v for k, v in dataclasses.asdict(r).items() if k != "report"}
        if r.report is not None:
            d["findings"] = [{k: v for k, v in dataclasses.asdict(f).items() if k != "text"} for f in r.report.errors]
        return d

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return dict(gpu=gpu, torch=torch.__version__, cuda=torch.version.cuda, results=[row(r) for r in results])


def table(results: list[Result], tools, ops) -> str:
    """tool x op: errors (seconds); a driver that failed alone, a failed program or a timeout in words."""
    by = {(r.op, r.tool): r for r in results}
    cols = ["plain", *tools]
    width = max(len(op) for op in ops) + 2
    lines = [" " * width + "".join(f"{c:>22}" for c in cols)]
    for op in ops:
        cells = []
        for c in cols:
            r = by.get((op, c))
            if r is None:
                cells.append("skipped")
            elif r.returncode is None:
                cells.append(f"timed out ({r.seconds:.0f} s)")
            elif c == "plain":
                cells.append(f"{'ran' if r.ok else 'FAILED'} ({r.seconds:.0f} s)")
            elif r.returncode:
                cells.append(f"{r.errors or 0} err, exit {r.returncode} ({r.seconds:.0f} s)")
            else:
                warn = f"+{r.warnings}w" if r.warnings else ""
                cells.append(f"{r.errors if r.errors is not None else '?'} err{warn} ({r.seconds:.0f} s)")
        lines.append(f"{op:<{width}}" + "".join(f"{c:>22}" for c in cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", choices=sorted(DRIVERS), help="run this op's cases (the sweep's child)")
    ap.add_argument("--list", action="store_true", help="with --driver: list the cases, run nothing")
    ap.add_argument(
        "--arch",
        type=int,
        help="the architecture whose cases to take (default: this GPU's; without one, 90 to list, 0 to run)",
    )
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="with --driver: where to run (cuda)")
    ap.add_argument("--tools", nargs="+", default=list(sanitizer.TOOLS), choices=sanitizer.TOOLS)
    ap.add_argument("--ops", default="", help="comma-separated ops (default: all)")
    ap.add_argument("--out", default="out/sanitize")
    ap.add_argument(
        "--jobs", type=int, default=JOBS, help=f"child processes at a time (default {JOBS}: half the cores)"
    )
    ap.add_argument("--timeout", type=float, default=600, help="seconds for one child (default 600)")
    args = ap.parse_args(argv)
    if args.driver:
        here = Device.here() if torch.cuda.is_available() else Device(arch=90 if args.list else 0)
        dev = Device(args.arch, here.sms, here.threads_per_sm) if args.arch is not None else here
        return drive(args.driver, dev, args.list, args.device)
    ops = [o for o in args.ops.split(",") if o] or sorted(DRIVERS)
    unknown = sorted(set(ops) - set(DRIVERS))
    if unknown:
        ap.error(f"no driver for {', '.join(unknown)} (the ops: {', '.join(sorted(DRIVERS))})")
    if not env.cuda_mode():
        print("compute-sanitizer checks CUDA kernels: no GPU here, nothing checked.")
        return 1
    exe = sanitizer.find()
    if exe is None:
        print(sanitizer.missing_reason())
        return 1
    print(f"compute-sanitizer: {exe}; tools {', '.join(args.tools)}; ops {', '.join(ops)}", flush=True)
    results = run_sweep(args.tools, ops, Path(args.out), jobs=args.jobs, timeout=args.timeout, exe=exe)
    return report(results, args.tools, ops, Path(args.out))


def report(results: list[Result], tools, ops, out: Path) -> int:
    """Print the table and every failing run; 1 where anything failed."""
    print(table(results, tools, ops))
    bad = [r for r in results if not r.ok]
    for r in bad:
        print(f"\n== {r.tool} {r.op}: {out / (r.tool + '-' + r.op + '.log')}")
        if r.report is not None:
            print(r.report.show(limit=3))
    print(f"\n{len(results) - len(bad)} of {len(results)} runs clean; results in {out / 'sanitize.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
