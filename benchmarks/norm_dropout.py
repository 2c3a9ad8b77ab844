"""Lesson 05: RMSNorm followed by dropout, forward in one kernel, declared as data (benchmarks/sweep.py): SPEC
for `python -m benchmarks.run`.

Bytes counted (the fewest the op needs): forward reads x and writes y, 2*M*N elements (the weight, N, is
left out); forward+backward adds backward's 3*M*N (read grad_y and x, write grad_x), 5*M*N in all. GB/s and
% of copy are *effective*: counted bytes over time.
    ours           course::rms_norm_dropout: one kernel, 2*M*N (the mask drawn in registers, never stored)
    ours unfused   course::rms_norm then course::dropout: 4*M*N (the normalized tensor written and read back)
    native         F.dropout(F.rms_norm(x)): the norm's kernels, then dropout writing y and a bool mask
    torch.compile  of that native pair (inductor's generated kernels, with its own random numbers)
"bwd" times the backward alone (3*M*N counted): "ours v2" is the op's backward (course::rms_norm_dropout_backward,
the fused pass of kernels/norm_dropout/norm_dropout.cu, 3*M*N; rows longer than 8192 elements, 4096 in float64, fall back to v1),
"ours v1" course::dropout_backward then course::rms_norm_backward (5*M*N moved). "fwd+bwd" is a CUDA graph replay of
one training step through autograd (the op's backward, v2; the kernels' time; the
generator moves on at every replay).

    python -m benchmarks.norm_dropout [--quick]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks import sweep
from helpers import bench
from helpers.ops import extension
from helpers.ops import norm_dropout as nd

P = 0.1  # a transformer's usual rate


def native(x, w):
    return F.dropout(F.rms_norm(x, (x.shape[-1],), w), P, True)


def targets(rows: list[dict]) -> str:
    """One line per op, shape and dtype: ours' % of a same-size copy and its speed-up over the others (for
    the backward alone: v2's over v1's)."""
    by = {(r["op"], r["shape"], r["dtype"], r["impl"]): r for r in rows}
    out = []
    for op, shape, dtype in sorted({(r["op"], r["shape"], r["dtype"]) for r in rows}):
        bwd = op.endswith(" bwd")
        ours = by.get((op, shape, dtype, "ours v2" if bwd else "ours"))
        if not ours:
            continue
        others = ("ours v1",) if bwd else ("ours unfused", "native", "torch.compile")
        ratios = [
            f"{by[(op, shape, dtype, b)]['ms'] / ours['ms']:4.2f}x {b}" for b in others if (op, shape, dtype, b) in by
        ]
        out.append(f"{op:<24} {shape:<11} {dtype:<9} {ours['pct_copy']:5.1f}% of copy, " + ", ".join(ratios))
    return "\n".join(out)


SPEC = sweep.Spec(
    gpu=[(4096, 4096), (16384, 1024), (2048, 16384)],
    gpu_more=[(64, 4096), (32768, 512), (256, 65536)],
    cpu=[(256, 1024)],
    report=targets,
)


def measure(case: sweep.Case) -> list[dict]:
    """bench.compare rows for "rms_norm+dropout fwd" and "rms_norm+dropout fwd+bwd" of ours, ours unfused,
    native PyTorch and torch.compile, and "rms_norm+dropout bwd" of our backward v1 and v2."""
    nd.register()
    ext = extension("norm_dropout")
    x, w = case.randn(), case.randn((case.shape[-1],), seed=2)
    n, es, device, cols = case.numel, case.element_size, case.device, case.shape[-1]
    compiled = torch.compile(native, dynamic=False)
    fwd = {
        "ours": lambda: ext.rms_norm_dropout(x, [cols], w, None, P, True),
        "ours unfused": lambda: nd.unfused(x, [cols], w, None, P),
        "native": lambda: native(x, w),
        "torch.compile": lambda: compiled(x, w),
    }
    rows = bench.compare(fwd, nbytes=2 * n * es, device=device, op="rms_norm+dropout fwd", **case.labels)

    g = case.randn(seed=1)
    _, rstd, state = ext.rms_norm_dropout(x, [cols], w, None, P, True)
    bwd = {f"ours v{v}": (lambda v: lambda: ext.backward(g, x, rstd, w, state, P, v))(v) for v in (1, 2)}
    rows += bench.compare(bwd, nbytes=3 * n * es, device=device, op="rms_norm+dropout bwd", **case.labels)

    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    compiled_step = torch.compile(native, dynamic=False)

    def step(f):
        def run():
            torch.autograd.grad(f(xg, wg), (xg, wg), g)

        return run

    both = {
        "ours": step(lambda x, w: nd.rms_norm_dropout(x, [cols], w, None, P)),
        "ours unfused": step(lambda x, w: nd.unfused(x, [cols], w, None, P)),
        "native": step(native),
        "torch.compile": step(compiled_step),
    }
    rows += bench.compare(
        both, nbytes=5 * n * es, device=device, op="rms_norm+dropout fwd+bwd", graph=True, **case.labels
    )
    return rows


if __name__ == "__main__":
    import sys

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = sweep.run(SPEC, measure, device, quick="--quick" in sys.argv)
    print(bench.table(rows, baseline=("ours unfused", "native", "torch.compile")))
