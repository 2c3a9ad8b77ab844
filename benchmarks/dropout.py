"""Lesson 05: dropout with a counter-based generator, forward, backward and forward+backward, declared as data
(benchmarks/sweep.py): SPEC for `python -m benchmarks.run`.

Bytes counted (the fewest the op needs): forward reads x and writes y (2 N elements), backward reads grad_y
and writes grad_x (2 N), forward+backward 4 N. GB/s and % of copy are *effective*: counted bytes over time.
Ours moves exactly those (the mask is recomputed from 16 bytes of generator state); native dropout also
writes a bool mask in forward and reads it in backward (N bytes each way), and torch.compile's generated
kernel (its own Philox) keeps a mask too. Ours draws 1 Philox4x32-10 call (10 rounds of two 32x32-bit
products) per 4 elements in forward and again in backward, so in 2-byte dtypes the integer arithmetic, not
memory, can set the pace. "ours v1" is the element-by-element kernel. "dropout fwd+bwd" is a CUDA graph replay
of one step (the kernels' time; the generator moves on at every replay, as in training).

    python -m benchmarks.dropout [--quick]  # the sweep's table, then the memory autograd keeps
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks import sweep
from helpers import bench
from helpers.ops import dropout as dp
from helpers.ops import extension

P = 0.1  # a transformer's usual rate


def targets(rows: list[dict], ops=("dropout fwd", "dropout bwd", "dropout fwd+bwd")) -> str:
    """One line per op, shape and dtype: ours' % of a same-size copy and its speed-up over native and
    torch.compile."""
    by = {(r["op"], r["shape"], r["dtype"], r["impl"]): r for r in rows}
    out = []
    for op, shape, dtype in sorted({(r["op"], r["shape"], r["dtype"]) for r in rows if r["op"] in ops}):
        ours = by.get((op, shape, dtype, "ours"))
        if not ours:
            continue
        ratios = [
            f"{by[(op, shape, dtype, b)]['ms'] / ours['ms']:4.2f}x {b}"
            for b in ("native", "torch.compile")
            if (op, shape, dtype, b) in by
        ]
        out.append(f"{op:<16} {shape:<11} {dtype:<9} {ours['pct_copy']:5.1f}% of copy, " + ", ".join(ratios))
    return "\n".join(out)


SPEC = sweep.Spec(
    gpu=[(4096, 4096), (8192, 8192)],
    gpu_more=[(1024, 1024), (16384, 8192)],
    cpu=[(1024, 1024)],
    report=targets,
)


def measure(case: sweep.Case) -> list[dict]:
    """bench.compare rows for "dropout fwd", "dropout bwd" and "dropout fwd+bwd" of ours, native PyTorch and
    torch.compile (of F.dropout, and of aten.native_dropout_backward for backward alone)."""
    ext = extension("dropout")
    dp.register()
    x, g = case.randn(), case.randn(seed=1)
    n, es, device = case.numel, case.element_size, case.device
    comp_fwd = torch.compile(lambda x: F.dropout(x, P, True), dynamic=False)
    fwd = {
        "ours": lambda: ext.forward(x, P, True),
        "ours v1": lambda: ext.forward(x, P, True, 1),
        "native": lambda: F.dropout(x, P, True),
        "torch.compile": lambda: comp_fwd(x),
    }
    rows = bench.compare(fwd, nbytes=2 * n * es, device=device, op="dropout fwd", **case.labels)

    _, state = ext.forward(x, P, True)
    _, mask = torch.ops.aten.native_dropout(x, P, True)
    native_bwd = torch.ops.aten.native_dropout_backward
    comp_bwd = torch.compile(lambda g, m: native_bwd(g, m, 1 / (1 - P)), dynamic=False)
    bwd = {
        "ours": lambda: ext.backward(g, state, P),
        "ours v1": lambda: ext.backward(g, state, P, 1),
        "native": lambda: native_bwd(g, mask, 1 / (1 - P)),
        "torch.compile": lambda: comp_bwd(g, mask),
    }
    rows += bench.compare(bwd, nbytes=2 * n * es, device=device, op="dropout bwd", **case.labels)

    xg = x.clone().requires_grad_()
    comp = torch.compile(lambda x: F.dropout(x, P, True), dynamic=False)

    def step(f):
        def run():
            torch.autograd.grad(f(xg), xg, g)

        return run

    both = {
        "ours": step(lambda x: dp.dropout(x, P)),
        "native": step(lambda x: F.dropout(x, P, True)),
        "torch.compile": step(comp),
    }
    rows += bench.compare(both, nbytes=4 * n * es, device=device, op="dropout fwd+bwd", graph=True, **case.labels)
    return rows


def memory(numel: int = 1 << 24, dtype=torch.float32) -> dict:
    """Bytes autograd keeps between forward and backward (beyond y) and the peak above the inputs during
    forward+backward, by torch.cuda.memory_allocated / max_memory_allocated, for ours and native dropout."""
    x = torch.randn(numel, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn_like(x)
    out = {}
    for name, f in (("ours", dp.dropout), ("native", lambda x, p: F.dropout(x, p, True))):
        f(x, P)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        y = f(x, P)
        kept = torch.cuda.memory_allocated() - base - y.numel() * y.element_size()
        (gx,) = torch.autograd.grad(y, x, g)
        del y, gx
        torch.cuda.synchronize()
        out[name] = dict(kept_bytes=kept, peak_bytes=torch.cuda.max_memory_allocated() - base)
    return out


if __name__ == "__main__":
    import sys

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = sweep.run(SPEC, measure, device, quick="--quick" in sys.argv)
    print(bench.table(rows, baseline=("native", "torch.compile")))
    if device == "cuda":
        for dtype in (torch.float32, torch.bfloat16):
            print(f"memory, 2^24 {dtype}: {memory(1 << 24, dtype)}")
