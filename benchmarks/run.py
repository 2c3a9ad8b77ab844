"""The benchmark suite: every benchmarks/<op>.py's sweep(), on this machine's GPU (or CPU), in one run.

    python -m benchmarks.run --out results/            # all ops
    python -m benchmarks.run --ops polynomial --quick  # one op, headline shapes only

Writes OUT/bench.csv (one row per op, shape, dtype, implementation) and OUT/bench.json (the same plus
the machine: GPU, torch, CUDA, date), and prints the summary: GB/s, % of a same-size copy measured in the
same run, and ratios against native PyTorch and torch.compile.
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

HERE = Path(__file__).resolve().parent
NOT_OPS = {"__init__", "run", "loader_times"}


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


def summary(rows: list[dict]) -> str:
    """One line per (op, shape, dtype): ours in GB/s and % of copy, ours/native and ours/compile speed."""
    out = [f"{'op':<20}{'shape':<12}{'dtype':<9}{'ours GB/s':>10}{'% copy':>8}{'x native':>10}{'x compile':>10}"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["op"], r["shape"], r["dtype"]), {})[r["impl"]] = r
    for (op, shape, dtype), g in groups.items():
        ours = g.get("ours")
        if not ours:
            continue
        nat, comp = g.get("native"), g.get("torch.compile")
        out.append(
            f"{op:<20}{shape:<12}{dtype:<9}{ours['gbps']:>10.0f}{ours['pct_copy']:>7.1f}%"
            + (f"{nat['ms'] / ours['ms']:>9.2f}x" if nat else f"{'':>10}")
            + (f"{comp['ms'] / ours['ms']:>9.2f}x" if comp else f"{'':>10}")
        )
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results")
    ap.add_argument("--ops", default="", help="comma-separated benchmark modules (default: all)")
    ap.add_argument("--quick", action="store_true", help="headline shapes only")
    args = ap.parse_args(argv)
    names = [n for n in args.ops.split(",") if n] or sorted(p.stem for p in HERE.glob("*.py") if p.stem not in NOT_OPS)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for name in names:
        mod = importlib.import_module(f"benchmarks.{name}")
        print(f"== {name} on {device}", flush=True)
        rows += mod.sweep(device=device, quick=args.quick)
    meta = machine()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = ["op", "shape", "dtype", "impl", "ms", "ms_lo", "ms_hi", "gbps", "pct_copy", "copy_gbps", "nbytes", "numel"]
    with open(out / "bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(meta) + keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**meta, **r})
    (out / "bench.json").write_text(json.dumps(dict(machine=meta, rows=rows), indent=1, default=str))
    print(json.dumps(meta))
    print(summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
