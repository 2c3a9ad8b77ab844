"""Eager forward+backward through autograd, the way a training step calls an op: y = op(...), then
torch.autograd.grad(y, inputs, grad_y), one call at a time from Python (no CUDA graph), per norm and
activation of the course (lesson 04: every op a real PyTorch op).

    python -m benchmarks.autograd --out results/<gpu>         # headline shapes, the CPU time per step, then
                                                              # the targets, met or missed (report)
    python -m benchmarks.autograd --smoke --out /tmp/x        # tiny, on whatever machine (a test runs it)

Implementations: "ours" (the public helpers.ops call: polynomial.polynomial, fused_bias_relu.fused_bias_relu,
layernorm.layer_norm), "native" (plain PyTorch: the written-out polynomial, relu(x * scale + bias),
F.layer_norm), "torch.compile" (the native function compiled, afresh per shape) and "Liger" (Liger-Kernel's
LayerNorm, Triton: GPU only, and only where liger-kernel is installed; it has no polynomial or bias+ReLU).

Two measurements:
* "<op> fwd+bwd autograd" rows: the GPU time of one eager step by bench.compare (triton's do_bench: CUDA
  events, warm-up, L2 flushed before every call; the copy and every implementation timed in turn three
  times, medians). When the CPU issues the step more slowly than the GPU runs it, the events see the GPU
  waiting, so these rows include whatever CPU time is exposed. GB/s and % of a same-size copy from the
  fewest bytes the step moves: polynomial (grad of x) reads x, writes y, reads grad_y and x, writes grad_x:
  5 N elements; fused_bias_relu the same plus the bias, read in forward and backward and its gradient
  written (5 N + 3 C); layernorm reads x, writes y, reads x and grad_y, writes grad_x (5 M N) plus the
  parameters: weight and bias read in forward, weight read and both gradients written in backward (5 N).
  On a GPU a further row, "ours, CUDA graph", times our step replayed as a CUDA graph: the same kernels
  with no CPU time between them, the step's GPU time alone (the eager row minus it is the CPU time exposed).
* "cpu per step" rows, at a small shape (64x1024 bf16 on a GPU) where the GPU's work is negligible: the
  wall-clock time per step over blocks of many steps issued back to back with no synchronization inside a
  block (the GPU runs behind the CPU, so the CPU never waits for it and the time is the CPU's: Python,
  dispatcher, autograd engine, allocations, launches), the median of the blocks, the implementations taking
  turns block by block (in a rotated order each round). Beside it, the GPU time of
  the same step replayed as a CUDA graph (bench.graphed): if that is not well below the CPU time, the
  row is marked GPU-bound and its CPU number is only an upper bound. On a machine without a GPU both are
  the same thing, the time per step.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers import bench
from helpers.ops import fused_bias_relu as fbr
from helpers.ops import layernorm as ln
from helpers.ops import polynomial as poly

COEFFS = [1.5, 0.5, -2.0, 0.25]
SCALE = 2.0
EPS = 1e-5
REPEAT = 3  # on the GPU: copy and implementations timed in turn three times, medians

BF16, FP32 = torch.bfloat16, torch.float32
HEADLINE = [((4096, 4096), BF16), ((64, 1024), BF16), ((8192, 8192), BF16), ((4096, 4096), FP32)]
MORE = [((32768, 1024), BF16), ((2048, 2048), BF16), ((1024, 1024), FP32)]
CPU_CASES = [((64, 1024), FP32), ((64, 1024), BF16)]
SMOKE = [((8, 64), FP32)]
PER_STEP = {"cuda": ((64, 1024), BF16), "cpu": ((64, 1024), BF16), "smoke": ((8, 64), FP32)}


@dataclasses.dataclass
class Step:
    """One op's forward+backward at one shape: `impls` maps an implementation to a callable that runs a
    step (forward, then torch.autograd.grad of the differentiable inputs)."""

    op: str
    impls: dict[str, Callable[[], None]]
    nbytes: int
    labels: dict


def eager_step(f, inputs, wrt, grad_y):
    """A step as a training loop runs it: y = f(*inputs), then torch.autograd.grad(y, wrt, grad_y)."""

    def run():
        torch.autograd.grad(f(*inputs), wrt, grad_y)

    return run


def liger_layer_norm():
    """Liger-Kernel's LayerNorm as a function (x, weight, bias, eps), or None where it cannot run: no GPU, or
    liger-kernel not installed."""
    if not torch.cuda.is_available():
        return None
    try:
        from liger_kernel.transformers.functional import liger_layer_norm as fn
    except ImportError:
        try:  # older releases, or without `transformers` installed: the autograd Function itself
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        except ImportError:
            return None
        fn = LigerLayerNormFunction.apply
    return fn


def _ours_layer_norm(x, w, b):
    return ln.layer_norm(x, w, b, EPS)


def steps(shape, dtype, device: str, backend: str = "inductor") -> list[Step]:
    """The three ops' steps at `shape` (rows x cols; cols is the normalized size and the bias length),
    with inputs from a fixed seed; torch.compile afresh (its caches reset first)."""
    torch._dynamo.reset()
    m, n = shape
    g = torch.Generator(device=device).manual_seed(0)

    def randn(*size, grad=False):
        return torch.randn(size, device=device, dtype=dtype, generator=g).requires_grad_(grad)

    es = torch.empty((), dtype=dtype).element_size()
    labels = dict(shape=f"{m}x{n}", dtype=str(dtype).replace("torch.", ""), numel=m * n, rows=m, cols=n)
    compile_ = lambda f: torch.compile(f, dynamic=False, backend=backend)  # noqa: E731
    out = []

    x, gy = randn(m, n, grad=True), randn(m, n)
    c = torch.tensor(COEFFS, device=device)
    native = poly.reference
    impls = {"ours": poly.polynomial, "native": native, "torch.compile": compile_(native)}
    out.append(
        Step(
            "poly fwd+bwd autograd",
            {k: eager_step(f, (x, c), (x,), gy) for k, f in impls.items()},
            5 * m * n * es,
            labels,
        )
    )

    b = randn(n, grad=True)
    native = lambda x, b: fbr.reference(x, b, SCALE)  # noqa: E731
    impls = {"ours": lambda x, b: fbr.fused_bias_relu(x, b, SCALE), "native": native, "torch.compile": compile_(native)}
    out.append(
        Step(
            "fbr fwd+bwd autograd",
            {k: eager_step(f, (x, b), (x, b), gy) for k, f in impls.items()},
            (5 * m * n + 3 * n) * es,
            labels,
        )
    )

    w, bb = randn(n, grad=True), randn(n, grad=True)
    native = lambda x, w, b: F.layer_norm(x, (n,), w, b, EPS)  # noqa: E731
    impls = {"ours": _ours_layer_norm, "native": native, "torch.compile": compile_(native)}
    liger = liger_layer_norm() if torch.device(device).type == "cuda" else None
    if liger is not None:
        impls["Liger"] = lambda x, w, b: liger(x, w, b, EPS)
    out.append(
        Step(
            "ln fwd+bwd autograd",
            {k: eager_step(f, (x, w, bb), (x, w, bb), gy) for k, f in impls.items()},
            (5 * m * n + 5 * n) * es,
            labels,
        )
    )
    return out


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def cpu_per_step(
    runs: dict[str, Callable[[], None]], device: str, steps: int = 200, blocks: int = 15, warmup: int = 30
) -> dict[str, float]:
    """Microseconds of wall clock per step of each implementation, steps issued back to back with no
    synchronization inside a block (so, with a GPU running behind, the CPU's time per step); the median of
    `blocks` blocks (15: with 7, a single measurement on an H100 host can put LayerNorm's step at 0.83x
    native's where repeats on the same machine give 0.99-1.08x).
    The implementations take turns block by block, each round in a rotated order, so that a host's drift
    (clocks, other load) or a position in the order favours none of them; the GPU catches up between blocks,
    outside the timing."""
    names = list(runs)
    for name in names:
        for _ in range(warmup):
            runs[name]()
    _sync(device)
    per = {name: [] for name in names}
    for b in range(blocks):
        for name in names[b % len(names) :] + names[: b % len(names)]:
            run = runs[name]
            start = time.perf_counter()
            for _ in range(steps):
                run()
            per[name].append((time.perf_counter() - start) / steps)
            _sync(device)
    return {name: statistics.median(v) * 1e6 for name, v in per.items()}


def graphed_step(run: Callable[[], None]) -> Callable[[], None] | None:
    """The step captured as a CUDA graph (bench.graphed: its replay runs the same kernels with no CPU time
    between them), or None where it cannot be captured."""
    try:
        return bench.graphed(run)
    except Exception as e:  # a capture failure is a finding, not a reason to lose the other rows
        print(f"    (CUDA graph capture failed: {type(e).__name__}: {str(e).splitlines()[0][:100]})", flush=True)
        torch.cuda.synchronize()
        return None


def gpu_per_step(run: Callable[[], None]) -> float:
    """Microseconds of GPU time per step: the step replayed as a CUDA graph, timed by bench.time. NaN where
    the step cannot be captured."""
    replay = graphed_step(run)
    return float("nan") if replay is None else bench.time(replay).ms * 1e3


GRAPHED = "ours, CUDA graph"  # the impl name of our step replayed as a graph: its GPU time alone


def timing_rows(cases, device: str, backend: str) -> list[dict]:
    """The timed steps; on a GPU also our step replayed as a CUDA graph (GRAPHED): the same kernels with no
    CPU between them, so that the gap to the eager row is the CPU time the step exposes (the autograd
    engine's hand-off to its device thread and back, the dispatcher, Python), not the kernels."""
    rows = []
    cuda = torch.device(device).type == "cuda"
    repeat = REPEAT if cuda else 1
    for shape, dtype in cases:
        for s in steps(shape, dtype, device, backend):
            for run in s.impls.values():  # torch.compile compiles here, not inside a timing
                run()
            impls = dict(s.impls)
            replay = graphed_step(s.impls["ours"]) if cuda else None
            if replay is not None:
                impls[GRAPHED] = replay
            rows += bench.compare(impls, nbytes=s.nbytes, device=device, op=s.op, repeat=repeat, **s.labels)
        print(f"  {shape[0]}x{shape[1]} {str(dtype).replace('torch.', '')}", flush=True)
    return rows


def per_step_rows(shape, dtype, device: str, backend: str, smoke: bool = False) -> list[dict]:
    """The CPU time per eager step (and, on a GPU, the graph-replayed GPU time) of every implementation."""
    cuda = torch.device(device).type == "cuda"
    rows = []
    for s in steps(shape, dtype, device, backend):
        cpu = cpu_per_step(s.impls, device, **(dict(steps=10, blocks=2, warmup=3) if smoke else {}))
        for impl, run in s.impls.items():
            cpu_us = cpu[impl]
            gpu_us = gpu_per_step(run) if cuda else float("nan")
            rows.append(
                dict(
                    s.labels,
                    op=s.op,
                    impl=impl,
                    device=device,
                    kind="cpu per step",
                    cpu_us=cpu_us,
                    gpu_us=gpu_us,
                    gpu_bound=bool(cuda and not gpu_us < 0.5 * cpu_us),
                )
            )
    return rows


def sweep(device: str = "cuda", quick: bool = False, *, smoke: bool = False, backend: str = "inductor") -> list[dict]:
    """All rows: the timed steps at the headline shapes (and more without `quick`), then the CPU per step.
    benchmarks.run calls this (a module without a SPEC)."""
    cuda = torch.device(device).type == "cuda"
    if smoke:
        cases = SMOKE
    elif cuda:
        cases = HEADLINE + ([] if quick else MORE)
    else:
        cases = CPU_CASES
    rows = timing_rows(cases, device, backend)
    shape, dtype = PER_STEP["smoke" if smoke else ("cuda" if cuda else "cpu")]
    print(f"  CPU time per step at {shape[0]}x{shape[1]} {str(dtype).replace('torch.', '')}", flush=True)
    return rows + per_step_rows(shape, dtype, device, backend, smoke)


def cpu_table(rows: list[dict]) -> str:
    """The "cpu per step" rows: microseconds of CPU per eager step, the GPU time of the same step replayed
    as a graph, and the CPU time against native's."""
    rows = [r for r in rows if r.get("kind") == "cpu per step"]
    native = {(r["op"], r["shape"], r["dtype"]): r["cpu_us"] for r in rows if r["impl"] == "native"}
    head = f"{'op':<22} {'shape':<10} {'dtype':<9} {'impl':<14} {'CPU us/step':>11} {'GPU us':>7} {'x native':>8}"
    lines = [head]
    for r in rows:
        ratio = native.get((r["op"], r["shape"], r["dtype"]))
        lines.append(
            f"{r['op']:<22} {r['shape']:<10} {r['dtype']:<9} {r['impl']:<14} {r['cpu_us']:>11.1f} "
            f"{r['gpu_us']:>7.1f} {(ratio / r['cpu_us']) if ratio else float('nan'):>7.2f}x"
            + ("  GPU-bound: the CPU number is an upper bound" if r["gpu_bound"] else "")
        )
    return "\n".join(lines)


def report(rows: list[dict]) -> str:
    """The course's targets for an op called through autograd, over this benchmark's rows, each point met
    or missed:
    - every eager step ("<op> fwd+bwd autograd", not graphed): ours no slower than native;
    - LayerNorm's bf16 4096x4096 eager step at 70 % of a copy or more (on a GPU);
    - the CPU time per eager step no more than native's.
    A missed eager step says where its time went: ours replayed as a CUDA graph (the kernels alone) beside
    it, the rest being CPU time the step exposes (Python, the autograd engine, the dispatcher), and the
    CPU time per step of both, so that a host whose CPU is slow reads as that, not as slow kernels."""
    by = {(r["op"], r["shape"], r["dtype"], r["impl"]): r for r in rows if "ms" in r}
    cpu = {(r["op"], r["impl"]): r for r in rows if r.get("kind") == "cpu per step"}
    lines, missed = [], 0
    for (op, shape, dtype, impl), r in by.items():
        if impl != "ours":
            continue
        native = by.get((op, shape, dtype, "native"))
        if native and native["ms"] < r["ms"]:
            missed += 1
            why = f"ours {r['ms'] * 1e3:.1f} us, native {native['ms'] * 1e3:.1f} us"
            graphed = by.get((op, shape, dtype, GRAPHED))
            if graphed:
                exposed = (r["ms"] - graphed["ms"]) * 1e3
                why += f"; ours as a CUDA graph {graphed['ms'] * 1e3:.1f} us, so {exposed:.1f} us of CPU exposed"
            if (op, "ours") in cpu and (op, "native") in cpu:
                mine, theirs = cpu[(op, "ours")], cpu[(op, "native")]
                why += (
                    f"; CPU per step at {mine['shape']} ours {mine['cpu_us']:.1f} us, native {theirs['cpu_us']:.1f} us"
                )
            lines.append(f"  MISSED {op} {shape} {dtype}: vs native {native['ms'] / r['ms']:.2f} < 1.0 ({why})")
        if op.startswith("ln ") and (shape, dtype) == ("4096x4096", "bfloat16") and "pct_copy" in r:
            if r.get("device") != "cpu" and r["pct_copy"] < 70:
                missed += 1
                lines.append(f"  MISSED {op} {shape} {dtype}: % copy {r['pct_copy']:.1f} < 70")
    for (op, impl), r in cpu.items():
        native = cpu.get((op, "native"))
        if impl == "ours" and native and native["cpu_us"] < r["cpu_us"]:
            missed += 1
            bound = " (GPU-bound: an upper bound)" if r["gpu_bound"] else ""
            lines.append(
                f"  MISSED {op} {r['shape']} {r['dtype']}: CPU per step {r['cpu_us']:.1f} us > native's "
                f"{native['cpu_us']:.1f} us{bound}"
            )
    return f"autograd targets: {missed} points missed\n" + "\n".join(lines)


def default_out() -> Path:
    """results/<gpu> (h100 for "NVIDIA H100 80GB HBM3"), results/cpu without one."""
    if not torch.cuda.is_available():
        return Path("results/cpu")
    name = torch.cuda.get_device_name()
    m = re.search(r"\b([A-Z]+\d+[A-Z]?)\b", name)
    return Path("results") / (m.group(1) if m else re.sub(r"\W+", "_", name)).lower()


def write(rows: list[dict], out: Path) -> None:
    """out/autograd.csv (one row per op, shape, dtype, implementation and measurement) and out/autograd.json
    (the same, with the machine: GPU, torch, CUDA, date)."""
    from benchmarks.run import machine

    meta = machine()
    out.mkdir(parents=True, exist_ok=True)
    keys = ["op", "shape", "dtype", "impl", "kind", "ms", "ms_lo", "ms_hi", "gbps", "pct_copy", "copy_gbps"]
    keys += ["nbytes", "numel", "cpu_us", "gpu_us", "gpu_bound"]
    with open(out / "autograd.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(meta) + keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**meta, "kind": "eager step", **r})
    (out / "autograd.json").write_text(json.dumps(dict(machine=meta, rows=rows), indent=1, default=str))


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="folder for autograd.csv/json (default: results/<gpu>)")
    ap.add_argument("--quick", action="store_true", help="headline shapes only")
    ap.add_argument("--smoke", action="store_true", help="one tiny shape, few steps: that it runs, not numbers")
    ap.add_argument("--backend", default="inductor", help="torch.compile's backend (smoke tests: aot_eager)")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"== autograd on {device}", flush=True)
    rows = sweep(device, args.quick, smoke=args.smoke, backend=args.backend)
    write(rows, Path(args.out) if args.out else default_out())
    timed = [r for r in rows if "gbps" in r]
    print(bench.table(timed, baseline=("native", "torch.compile")))
    print(cpu_table(rows))
    print(report(rows))
    return rows


if __name__ == "__main__":
    main()
