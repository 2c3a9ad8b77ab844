"""CPU time per eager call of each registered op, two ways: through torch.ops.course.NAME (the public surface)
and through the op's pybind11 binding of the same registered op (the module's NAME function, which calls the
dispatcher from C++). Decides where helpers/ops keeps the binding for eager calls.

    python -m benchmarks.eager_call [--out DIR]     # a table, and DIR/eager_call.json

At a small shape (64x1024 bf16 on a GPU, float32 on the CPU) the GPU's work is negligible, so the wall time
per call, over blocks of calls with no synchronization inside (benchmarks.autograd.cpu_per_step), is the CPU's:
Python, argument conversion, the dispatcher, autograd, the launches. Two rows per op: the forward alone (no
grad), and a step (forward with grad, then torch.autograd.grad).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks.autograd import cpu_per_step
from helpers import env
from helpers.ops import add_norm, extension, fused_bias_relu, layernorm, norm_dropout, polynomial, rmsnorm


def cases(device: str):
    """(op, module name, a function of (call, inputs) for each way, the inputs), at 64x1024."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(0)

    def randn(*shape, grad=True):
        return torch.randn(*shape, generator=g).to(device, dtype).requires_grad_(grad)

    x, r, w, b = randn(64, 1024), randn(64, 1024), randn(1024), randn(1024)
    coeffs = torch.tensor([1.5, 0.5, -2.0, 0.25], device=device, requires_grad=True)
    shape = [1024]
    return [
        ("polynomial", "polynomial", lambda f: f(x, coeffs), (x, coeffs)),
        ("fused_bias_relu", "fused_bias_relu", lambda f: f(x, b, 2.0), (x, b)),
        ("layer_norm", "layernorm", lambda f: f(x, shape, w, b, 1e-5), (x, w, b)),
        ("rms_norm", "rmsnorm", lambda f: f(x, shape, w, None), (x, w)),
        ("add_rms_norm", "add_norm", lambda f: f(x, r, shape, w, None)[0], (x, r, w)),
        ("add_layer_norm", "add_norm", lambda f: f(x, r, shape, w, b, 1e-5)[0], (x, r, w, b)),
        ("rms_norm_dropout", "norm_dropout", lambda f: f(x, shape, w, None, 0.1, True)[0], (x, w)),
    ]


def measure(device: str) -> list[dict]:
    for module in (polynomial, fused_bias_relu, layernorm, rmsnorm, add_norm, norm_dropout):
        module.register()
    rows = []
    for op, module, call, inputs in cases(device):
        ways = {"torch.ops": getattr(torch.ops.course, op), "binding": getattr(extension(module), op)}
        grad_y = call(ways["torch.ops"]).detach().clone()
        forward, step = {}, {}
        for way, f in ways.items():

            def fwd(f=f):
                with torch.no_grad():
                    call(f)

            def both(f=f):
                torch.autograd.grad(call(f), inputs, grad_y)

            forward[way], step[way] = fwd, both
        for what, runs in (("forward", forward), ("forward+backward", step)):
            us = cpu_per_step(runs, device)
            rows.append({"op": op, "what": what, **{f"{k} us": round(v, 1) for k, v in us.items()}})
    return rows


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    device = "cuda" if env.cuda_mode() else "cpu"
    rows = measure(device)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"CPU time per eager call, µs (median of blocks), {name}, torch {torch.__version__}")
    print(f"{'op':18} {'call':17} {'torch.ops':>10} {'binding':>10} {'saved':>7}")
    for r in rows:
        saved = r["torch.ops us"] - r["binding us"]
        print(f"{r['op']:18} {r['what']:17} {r['torch.ops us']:10.1f} {r['binding us']:10.1f} {saved:7.1f}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {"device": name, "torch": torch.__version__}
        (args.out / "eager_call.json").write_text(json.dumps({"machine": meta, "rows": rows}, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
