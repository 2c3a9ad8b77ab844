"""Lesson 01: y = a*x^3 + b*x^2 + c*x + d, forward, forward+backward for x (fixed coefficients), and
forward+backward for x and learnable coefficients (whose gradients add four reductions).

Bytes counted: forward reads x and writes y (2 N elements); forward+backward adds reading grad_y and
x and writing grad_x (5 N in all; the 4 coefficient gradients are negligible)."""

from __future__ import annotations

import torch

from helpers import bench
from helpers.ops import extension
from helpers.ops import polynomial as poly

HEADLINE = [(4096, 4096), (8192, 8192), (32768, 1024)]
SWEEP = [(1 << k,) for k in range(16, 27, 2)]
COEFFS = [1.5, 0.5, -2.0, 0.25]


def _fwd_bwd(f, x, c, g):
    wrt = tuple(t for t in (x, c) if t.requires_grad)

    def run():
        torch.autograd.grad(f(x, c), wrt, g)

    return run


def cases(device: str, quick: bool):
    shapes = HEADLINE if device == "cuda" else [(1024, 1024)]
    if not quick:
        shapes = shapes + (SWEEP if device == "cuda" else [(1 << 14,), (1 << 18,)])
    for dtype in (torch.float32, torch.bfloat16):
        for shape in shapes:
            yield shape, dtype


def sweep(device: str = "cuda", quick: bool = False) -> list[dict]:
    ext = extension("polynomial")
    rows = []
    for shape, dtype in cases(device, quick):
        torch._dynamo.reset()  # a fresh compile per shape: no recompile limit, no dynamic shapes
        compiled = torch.compile(poly.reference, dynamic=False)
        x = torch.randn(shape, device=device, dtype=dtype)
        c = torch.tensor(COEFFS, device=device)
        n, es = x.numel(), x.element_size()
        labels = dict(shape="x".join(map(str, shape)), dtype=str(dtype).replace("torch.", ""), numel=n)
        fwd = {
            "ours": lambda: ext.forward(x, c, 2),
            "ours v1": lambda: ext.forward(x, c, 1),
            "native": lambda: poly.reference(x, c),
            "torch.compile": lambda: compiled(x, c),
        }
        rows += bench.compare(fwd, nbytes=2 * n * es, device=device, op="poly fwd", **labels)
        g = torch.randn_like(x)
        xg = x.clone().requires_grad_()
        for op, cc in (("poly fwd+bwd", c), ("poly fwd+bwd learn", c.clone().requires_grad_())):
            both = {
                "ours": _fwd_bwd(poly.polynomial, xg, cc, g),
                "ours (Python Function)": _fwd_bwd(poly.polynomial_python, xg, cc, g),
                "native": _fwd_bwd(poly.reference, xg, cc, g),
                "torch.compile": _fwd_bwd(compiled, xg, cc, g),
            }
            rows += bench.compare(both, nbytes=5 * n * es, device=device, op=op, **labels)
        print(f"  {labels['shape']:>12} {labels['dtype']}", flush=True)
    return rows
