"""Where the CPU time of one eager training step goes, per implementation: torch.profiler over many steps
(forward, then torch.autograd.grad), as benchmarks/autograd.py times them.

    python -m benchmarks.profile_step --ops ln --shape 64x1024 --dtype bfloat16      # a table per impl
    python -m benchmarks.profile_step --ops ln --trace /tmp/traces                   # + a timeline to open
                                                                                     #   in chrome://tracing

For each implementation: the wall time per step without the profiler (blocks of steps issued back to back,
no synchronization inside a block, as benchmarks/autograd's "cpu per step" rows), then per step under the
profiler: GPU kernels launched, launch calls (cudaLaunchKernel and friends), allocations (aten::empty*),
dispatcher ops entered, and the operators with the most self CPU time. A step that launches as many kernels
as another but allocates or dispatches more shows where its extra CPU microseconds go.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.autograd import steps

LAUNCH = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def wall_us(run, steps_per_block: int = 200, blocks: int = 7) -> float:
    """Median wall-clock microseconds per step over blocks of steps issued without synchronizing."""
    for _ in range(50):
        run()
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    times = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(steps_per_block):
            run()
        times.append((time.perf_counter() - t0) / steps_per_block * 1e6)
        sync()
    return statistics.median(times)


def profile_run(run, n: int, trace: Path | None) -> dict:
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    for _ in range(20):
        run()
    with profile(activities=activities, acc_events=True) as prof:
        for _ in range(n):
            run()
        if cuda:
            torch.cuda.synchronize()
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    events = prof.key_averages()
    per = lambda pred: sum(e.count for e in events if pred(e)) / n  # noqa: E731
    kernels = sum(e.count for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
    top = sorted((e for e in events if e.self_cpu_time_total > 0), key=lambda e: -e.self_cpu_time_total)[:8]
    return dict(
        kernels=kernels / n,
        launches=per(lambda e: e.key in LAUNCH),
        allocations=per(lambda e: e.key.startswith("aten::empty")),
        ops=per(lambda e: "::" in e.key),
        top=[(e.key, e.self_cpu_time_total / n, e.count / n) for e in top],
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="ln", help="step names' prefixes: poly, fbr, ln (comma-separated)")
    ap.add_argument("--shape", default="64x1024")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--steps", type=int, default=200, help="steps under the profiler")
    ap.add_argument("--trace", default="", help="folder for chrome traces (one per implementation)")
    ap.add_argument("--skip", default="torch.compile", help="implementations to leave out (comma-separated)")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    m, n = (int(v) for v in args.shape.split("x"))
    dtype = getattr(torch, args.dtype)
    wanted = tuple(args.ops.split(","))
    skip = set(args.skip.split(",")) if args.skip else set()
    for step in steps((m, n), dtype, device):
        if not step.op.startswith(wanted):
            continue
        print(f"\n{step.op}  {args.shape} {args.dtype} on {device}")
        print(f"{'impl':14} {'us/step':>8} {'kernels':>8} {'launches':>8} {'allocs':>7} {'ops':>6}")
        details = {}
        for impl, run in step.impls.items():
            if impl in skip:
                continue
            us = wall_us(run)
            trace = Path(args.trace) / f"{step.op.split()[0]}_{impl}.json" if args.trace else None
            p = profile_run(run, args.steps, trace)
            details[impl] = p
            print(
                f"{impl:14} {us:8.1f} {p['kernels']:8.1f} {p['launches']:8.1f} {p['allocations']:7.1f} {p['ops']:6.1f}"
            )
        for impl, p in details.items():
            print(f"  {impl}: most self CPU per step (us, calls)")
            for key, us, count in p["top"]:
                print(f"    {us:7.1f} {count:5.1f}  {key[:90]}")


if __name__ == "__main__":
    main()
