"""Eager CPU time per call of each op's public wrapper (helpers.ops.*), this checkout against another one, for
checking that a change of the code's shape left the per-call cost alone.

    python -m benchmarks.eager_ab --other /path/to/other/checkout [--out DIR]

Each side runs in its own process (an op's registrations and Python wrappers are its checkout's), alternating
`--rounds` times (default 3); per op, the least over the rounds of benchmarks.autograd.cpu_per_step (wall time per
call over blocks of calls with no synchronization inside; the least, as timeit advises, since other work on the
machine only adds time; the medians are in the JSON too). At 64x1024 bf16 (float32 on the CPU) the GPU's work is
negligible, so the time is the CPU's (Python, argument checks, the dispatcher, autograd, the launches). Two rows
per op: the forward alone (no grad), and a step (forward with grad, then torch.autograd.grad). Only wrappers
whose signature both checkouts share are called.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def measure(root: Path) -> dict[str, dict[str, float]]:
    """{op: {"fwd_us", "step_us"}} for the checkout at `root` (call in a fresh process: imports its helpers)."""
    sys.path.insert(0, str(root))
    import torch

    from helpers import env

    env.bootstrap(solutions=True, quiet=True)
    from benchmarks.autograd import cpu_per_step  # after that checkout's helpers: it imports them
    from helpers.ops import add_norm, fused_bias_relu, layernorm, norm_dropout, polynomial, rmsnorm

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device, dtype).requires_grad_()

    x, r, w, b = randn(64, 1024), randn(64, 1024), randn(1024), randn(1024)
    coeffs = torch.tensor([1.5, 0.5, -2.0, 0.25], device=device, requires_grad=True)
    shape = [1024]
    cases = {
        "polynomial": (lambda: polynomial.polynomial(x, coeffs), (x, coeffs)),
        "fused_bias_relu": (lambda: fused_bias_relu.fused_bias_relu(x, b, 2.0), (x, b)),
        "layer_norm": (lambda: layernorm.layer_norm(x, w, b, 1e-5), (x, w, b)),
        "rms_norm": (lambda: rmsnorm.rms_norm(x, shape, w, None), (x, w)),
        "add_rms_norm": (lambda: add_norm.add_rms_norm(x, r, shape, w, None), (x, r, w)),
        "add_layer_norm": (lambda: add_norm.add_layer_norm(x, r, shape, w, b, 1e-5), (x, r, w, b)),
        "rms_norm_dropout": (lambda: norm_dropout.rms_norm_dropout(x, shape, w, None, 0.1, True), (x, w)),
    }

    def first(y):
        return y[0] if isinstance(y, (tuple, list)) else y

    result = {}
    for op, (call, inputs) in cases.items():
        grad_y = torch.randn_like(first(call()))

        def forward(call=call):
            with torch.no_grad():
                call()

        def step(call=call, inputs=inputs, grad_y=grad_y):
            torch.autograd.grad(first(call()), inputs, grad_y)

        us = cpu_per_step({"fwd_us": forward, "step_us": step}, device)
        result[op] = {what: us[what] for what in ("fwd_us", "step_us")}
    return result


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--other", type=Path, help="the other checkout (its helpers/ and kernels/)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--rounds", type=int, default=3, help="processes per side, alternating (default 3)")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # internal: one side, JSON on stdout
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure.resolve())))
        return {}
    sides = {"before": args.other.resolve(), "after": HERE}
    runs = {side: [] for side in sides}
    for i in range(args.rounds):
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            cmd = [sys.executable, "-m", "benchmarks.eager_ab", "--measure", str(sides[side])]
            done = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, check=True)
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    table = {}
    print(f"{'op':18} {'fwd before':>11} {'after':>8} {'step before':>12} {'after':>8}  (us per call, least of rounds)")
    for op in runs["after"][0]:
        row = {}
        for side in sides:
            for what in ("fwd_us", "step_us"):
                values = [r[op][what] for r in runs[side]]
                row[f"{what}_{side}"] = min(values)
                row[f"{what}_{side}_median"] = statistics.median(values)
        table[op] = row
        print(f"{op:18} {row['fwd_us_before']:11.1f} {row['fwd_us_after']:8.1f} "
              f"{row['step_us_before']:12.1f} {row['step_us_after']:8.1f}")  # fmt: skip
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {"other": str(args.other), "rounds": args.rounds, "ops": table, "runs": runs}
        (args.out / "eager_ab.json").write_text(json.dumps(record, indent=1) + "\n")
    return table


if __name__ == "__main__":
    main()
