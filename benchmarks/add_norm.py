"""Lesson 05: the fused residual add + norm, h = x + residual; y = norm(h), forward and backward, for RMSNorm
(against the unfused pair in native PyTorch, torch.compile of that pair, and Liger-Kernel's fused add +
RMSNorm where installed) and LayerNorm's forward (native and compiled pair).

Bytes counted: forward reads x and residual and writes h and y (4 M N elements); backward reads grad_y,
grad_h and h and writes grad_input, the gradient of x and residual alike (4 M N). The unfused native pair
moves 5 M N forward (the add's 3, the norm's 2). Shapes: benchmarks/rmsnorm.py's sweep."""

from __future__ import annotations

import torch

from benchmarks import rmsnorm as rms_bench
from benchmarks import sweep
from helpers import bench
from helpers.ops import add_norm as an
from helpers.ops import extension

EPS = rms_bench.EPS

SPEC = sweep.Spec(
    gpu=rms_bench.SPEC.gpu,
    gpu_more=rms_bench.SPEC.gpu_more,
    cpu=[(1024, 1024)],
    cpu_more=[(64, 8192)],
    report=lambda rows: (
        "add_norm targets (fused add + RMSNorm forward >= 90 % of copy): "
        + ", ".join(
            f"{r['shape']} {r['dtype']} {r['pct_copy']:.0f} %"
            for r in rows
            if r["op"] == "add+rms fwd" and r["impl"] == "ours" and r["pct_copy"] < 90
        )
    ),
)


def liger_fused_add_rms_norm():
    if not torch.cuda.is_available():
        return None
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except ImportError:
        return None
    return lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)


def measure(case: sweep.Case) -> list[dict]:
    ext = extension("add_norm")
    an.register()
    m, n = case.shape
    x, r, gy, gh = (case.randn(seed=s) for s in range(4))
    w, b = case.randn((n,), seed=4), case.randn((n,), seed=5)
    es, dev = case.element_size, case.device
    pair = lambda x, r, w: an.reference_rms(x, r, (n,), w, EPS)  # noqa: E731
    compiled = torch.compile(pair, dynamic=False)
    fwd = {
        "ours": lambda: ext.forward(x, r, w, EPS),
        "native": lambda: pair(x, r, w),
        "torch.compile": lambda: compiled(x, r, w),
    }
    liger = liger_fused_add_rms_norm()
    if liger is not None:
        fwd["Liger"] = lambda: liger(x, r, w)
    rows = bench.compare(fwd, nbytes=4 * m * n * es, device=dev, op="add+rms fwd", **case.labels)

    _, h, rstd = ext.forward(x, r, w, EPS)
    bwd = {"ours": lambda: torch.ops.course.add_rms_norm_backward(gy, gh, h, [n], rstd, w, [True, True])}
    rows += bench.compare(bwd, nbytes=4 * m * n * es, device=dev, op="add+rms bwd", **case.labels)

    lpair = lambda x, r, w, b: an.reference_layer(x, r, (n,), w, b, 1e-5)  # noqa: E731
    lcompiled = torch.compile(lpair, dynamic=False)
    lfwd = {
        "ours": lambda: torch.ops.course.add_layer_norm(x, r, [n], w, b, 1e-5),
        "native": lambda: lpair(x, r, w, b),
        "torch.compile": lambda: lcompiled(x, r, w, b),
    }
    rows += bench.compare(lfwd, nbytes=4 * m * n * es, device=dev, op="add+ln fwd", **case.labels)
    return rows
