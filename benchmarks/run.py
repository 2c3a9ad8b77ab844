"""The benchmark suite: every benchmarks/<op>.py's sweep, on this machine's GPU (or CPU), in one run.

    python -m benchmarks.run --out results/            # all ops
    python -m benchmarks.run --ops polynomial --quick  # one op, headline shapes only

Writes OUT/bench.csv (one row per op, shape, dtype, implementation) and OUT/bench.json (the same plus
the machine: GPU, torch, CUDA, date), and prints the summary: GB/s, % of a same-size copy measured in the
same run, and ratios against native PyTorch and torch.compile (benchmarks.sweep.table); then the CPU time
per eager step that benchmarks/autograd.py measures (its "cpu per step" rows, benchmarks.autograd.cpu_table).

An op's module declares its sweep as data, SPEC = sweep.Spec(...) and measure(case) -> rows (see
benchmarks/sweep.py); a module without a SPEC is run through its own sweep(device=, quick=).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib
import json
import platform
from pathlib import Path

import torch

from benchmarks import sweep

HERE = Path(__file__).resolve().parent


def benchmark_names() -> list[str]:
    """The benchmark modules: those that declare a sweep (SPEC = sweep.Spec(...), or a sweep() function).
    The other scripts here (loader_times, eager_call, ddp_train, library_table, ...) run on their own."""
    return sorted(
        p.stem
        for p in HERE.glob("*.py")
        if any(line.startswith(("SPEC =", "SPEC:", "def sweep(")) for line in p.read_text().splitlines())
    )


def machine() -> dict:
    cuda = torch.cuda.is_available()
    return dict(
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        gpu=torch.cuda.get_device_name() if cuda else None,
        sms=torch.cuda.get_device_properties(0).multi_processor_count if cuda else None,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        python=platform.python_version(),
        cpu=platform.processor() or platform.machine(),
    )


def op_rows(mod, device: str, quick: bool) -> list[dict]:
    """The rows of one benchmark module: its SPEC through sweep.run, else its own sweep()."""
    if hasattr(mod, "SPEC"):
        return sweep.run(mod.SPEC, mod.measure, device, quick)
    return mod.sweep(device=device, quick=quick)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results")
    ap.add_argument("--ops", default="", help="comma-separated benchmark modules (default: all)")
    ap.add_argument("--quick", action="store_true", help="headline shapes only")
    args = ap.parse_args(argv)
    names = [n for n in args.ops.split(",") if n] or benchmark_names()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for name in names:
        mod = importlib.import_module(f"benchmarks.{name}")
        print(f"== {name} on {device}", flush=True)
        rows += op_rows(mod, device, args.quick)
    meta = machine()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = ["op", "shape", "dtype", "impl", "ms", "ms_lo", "ms_hi", "gbps", "pct_copy", "copy_gbps", "nbytes", "numel"]
    keys += ["kind", "cpu_us", "gpu_us", "gpu_bound"]  # benchmarks/autograd.py's CPU time per step
    with open(out / "bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(meta) + keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**meta, **r})
    (out / "bench.json").write_text(json.dumps(dict(machine=meta, rows=rows), indent=1, default=str))
    print(json.dumps(meta))
    print(sweep.table([r for r in rows if "gbps" in r]))
    if any(r.get("kind") == "cpu per step" for r in rows):
        from benchmarks.autograd import cpu_table

        print(cpu_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
