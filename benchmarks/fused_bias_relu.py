"""Lesson 02: y = relu(x * scale + bias), forward and forward+backward (grad_x and grad_bias), declared as
data (benchmarks/sweep.py): SPEC for `python -m benchmarks.run`, NOTEBOOK for lesson 02's plots.

Bytes counted (the fewest the op needs): forward reads x and writes y (2 N elements); forward+backward adds
reading grad_y and y and writing grad_x (5 N in all), plus the bias and its gradient (C each). GB/s and %
of copy are *effective*: counted bytes over time. "ours" is forward v3 and the C++ autograd Function saving
a bit mask, which moves 4 N elements and 2 bits per element (actual_bytes), so it can pass 100% of the
counted bytes' copy; "ours, saves y" is the same Function saving y. On a GPU, "fbr fwd+bwd" is a CUDA graph
replay of the step and "fbr fwd+bwd eager" the calls from Python; the targets (>= 90% of a copy, >= 0.97x
torch.compile at 4096x4096 and 8192x8192) are printed after the sweep."""

from __future__ import annotations

import torch

from benchmarks import sweep
from helpers import bench
from helpers.ops import extension
from helpers.ops import fused_bias_relu as fbr

SCALE = 2.0


def actual_bytes(rows: int, cols: int, element_size: int, save: str = "bits") -> int:
    """Bytes forward+backward really moves: x, y, grad_y, grad_x, the bias and its gradient (in
    element_size), and what backward reads to know relu'(z): y, or 1 bit per element written and read."""
    n = rows * cols
    if save == "bits":
        return (4 * n + 3 * cols) * element_size + 2 * 4 * -(-n // 32)
    return (5 * n + 3 * cols) * element_size


def targets(
    rows: list[dict],
    shapes=("4096x4096", "8192x8192"),
    pct: float = 90.0,
    slack: float = 0.03,
    ops=("fbr fwd", "fbr fwd+bwd"),
) -> str:
    """Lesson 02's performance targets, checked on bench rows: ours at >= `pct`% of a same-size copy, and
    no slower than torch.compile beyond `slack`, for forward and forward+backward (GPU time) at `shapes`."""
    by = {(r["op"], r["shape"], r["dtype"], r["impl"]): r for r in rows}
    out = []
    keys = {(r["op"], r["shape"], r["dtype"]) for r in rows if r["shape"] in shapes and r["op"] in ops}
    for op, shape, dtype in sorted(keys):
        ours, comp = by.get((op, shape, dtype, "ours")), by.get((op, shape, dtype, "torch.compile"))
        if not ours:
            continue
        speed = comp["ms"] / ours["ms"] if comp else float("nan")
        ok = ours["pct_copy"] >= pct and (not comp or speed >= 1 - slack)
        out.append(
            f"{'met    ' if ok else 'MISSED '} {op:<12} {shape:<10} {dtype:<9} {ours['pct_copy']:5.1f}% of copy, "
            f"{speed:4.2f}x torch.compile"
        )
    return "\n".join(out)


SPEC = sweep.Spec(
    gpu=[(4096, 4096), (8192, 8192), (32768, 1024)],
    gpu_more=[(1024, 1024), (2048, 2048), (65536, 256), (1 << 20, 64)],
    cpu=[(1024, 1024)],
    cpu_more=[(256, 256), (4096, 256)],
    report=targets,
)
# Lesson 02's plots: a row of square shapes (the notebook runs it with quick=True).
NOTEBOOK = sweep.Spec(
    gpu=[(1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192)], cpu=[(256, 256), (1024, 1024)], report=targets
)


def _fwd_bwd(f, x, bias, g):
    def run():
        y = f(x, bias)
        torch.autograd.grad(y, (x, bias), g)

    return run


def measure(case: sweep.Case) -> list[dict]:
    """bench.compare rows for forward ("fbr fwd") and forward+backward ("fbr fwd+bwd") of ours, native PyTorch
    and torch.compile. "ours" is forward v3 and the C++ autograd Function saving the bit mask; "ours v2",
    "ours v1", "ours, saves y" (the C++ Function) and "ours (Python Function)" (bits) the alternatives.
    On a GPU, "fbr fwd+bwd" times each forward+backward step as a CUDA graph replay (bench.graphed: the
    kernels' time, for every implementation alike) and "fbr fwd+bwd eager" the same calls made one by one
    from Python, where on mid-size tensors the autograd engine's CPU time per step can exceed the GPU's."""
    ext = extension("fused_bias_relu")
    comp = torch.compile(fbr.reference, dynamic=False)
    x, b, g = case.randn(), case.randn(case.shape[-1:], seed=1), case.randn(seed=2)
    n, c, es, device = case.numel, case.shape[-1], case.element_size, case.device
    fwd = {
        "ours": lambda: ext.forward(x, b, SCALE),
        "ours v2": lambda: ext.forward(x, b, SCALE, 2),
        "ours v1": lambda: ext.forward(x, b, SCALE, 1),
        "native": lambda: fbr.reference(x, b, SCALE),
        "torch.compile": lambda: comp(x, b, SCALE),
    }
    rows = bench.compare(fwd, nbytes=(2 * n + c) * es, device=device, op="fbr fwd", **case.labels)
    xg, bg = x.clone().requires_grad_(), b.clone().requires_grad_()
    both = {
        "ours": _fwd_bwd(lambda x, b: fbr.fused_bias_relu(x, b, SCALE, ext=ext), xg, bg, g),
        "ours, saves y": _fwd_bwd(lambda x, b: fbr.fused_bias_relu(x, b, SCALE, save="output", ext=ext), xg, bg, g),
        "ours (Python Function)": _fwd_bwd(lambda x, b: fbr.fused_bias_relu_python(x, b, SCALE, ext=ext), xg, bg, g),
        "native": _fwd_bwd(lambda x, b: fbr.reference(x, b, SCALE), xg, bg, g),
        "torch.compile": _fwd_bwd(lambda x, b: comp(x, b, SCALE), xg, bg, g),
    }
    nb = (5 * n + 3 * c) * es
    if torch.device(device).type == "cuda":  # the calls one by one from Python, as eager training makes them
        # (before any graph is captured: a graph keeps its own memory pool for as long as it lives)
        rows += bench.compare(both, nbytes=nb, device=device, op="fbr fwd+bwd eager", **case.labels)
    rows += bench.compare(both, nbytes=nb, device=device, op="fbr fwd+bwd", graph=True, **case.labels)
    return rows
