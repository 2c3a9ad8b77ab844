"""Lesson 01: y = a*x^3 + b*x^2 + c*x + d, forward, forward+backward for x (fixed coefficients), and
forward+backward for x and learnable coefficients (whose gradients add four reductions).

"ours" is forward v2 and backward v2 (kernels/polynomial/polynomial.cu); "ours v1" is forward v1, the exercise, built
from its solution (a stub would be timed doing nothing). Bytes counted: forward reads x and writes y
(2 N elements); forward+backward adds reading grad_y and x and writing grad_x (5 N in all; the 4
coefficient gradients are negligible)."""

from __future__ import annotations

import os

import torch

from benchmarks import sweep
from helpers import bench, loader
from helpers.ops import polynomial as poly

SPEC = sweep.Spec(
    gpu=[(4096, 4096), (8192, 8192), (32768, 1024)],
    gpu_more=[(1 << k,) for k in range(16, 27, 2)],
    cpu=[(1024, 1024)],
    cpu_more=[(1 << 14,), (1 << 18,)],
)
COEFFS = [1.5, 0.5, -2.0, 0.25]


def _with_solutions():
    """The op built with the exercises' solutions (COURSE_SOLUTIONS=1 for this build only)."""
    was = os.environ.get("COURSE_SOLUTIONS")
    os.environ["COURSE_SOLUTIONS"] = "1"
    try:
        return loader.load("polynomial")
    finally:
        if was is None:
            del os.environ["COURSE_SOLUTIONS"]
        else:
            os.environ["COURSE_SOLUTIONS"] = was


def _fwd_bwd(f, x, c, g):
    wrt = tuple(t for t in (x, c) if t.requires_grad)

    def run():
        torch.autograd.grad(f(x, c), wrt, g)

    return run


def measure(case: sweep.Case) -> list[dict]:
    ext = _with_solutions()
    compiled = torch.compile(poly.reference, dynamic=False)
    x = case.randn()
    c = torch.tensor(COEFFS, device=case.device)
    n, es, device = case.numel, case.element_size, case.device
    fwd = {
        "ours": lambda: ext.forward(x, c, 2),
        "ours v1": lambda: ext.forward(x, c, 1),
        "native": lambda: poly.reference(x, c),
        "torch.compile": lambda: compiled(x, c),
    }
    rows = bench.compare(fwd, nbytes=2 * n * es, device=device, op="poly fwd", **case.labels)
    g = case.randn(seed=1)
    xg = x.clone().requires_grad_()
    for op, cc in (("poly fwd+bwd", c), ("poly fwd+bwd learn", c.clone().requires_grad_())):
        both = {
            "ours": _fwd_bwd(poly.polynomial, xg, cc, g),
            "ours (Python Function)": _fwd_bwd(poly.polynomial_python, xg, cc, g),
            "native": _fwd_bwd(poly.reference, xg, cc, g),
            "torch.compile": _fwd_bwd(compiled, xg, cc, g),
        }
        rows += bench.compare(both, nbytes=5 * n * es, device=device, op=op, **case.labels)
    return rows
