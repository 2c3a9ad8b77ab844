"""Lesson 05: RMSNorm over the last dimension, forward, backward, and forward+backward through autograd,
against native PyTorch, torch.compile and Liger-Kernel (Triton; GPU only, where liger-kernel is installed).

"ours" is forward v2 and backward v2 (kernels/rmsnorm/rmsnorm.cu). Bytes counted (DESIGN.md's model): forward reads
x and writes y (2 M N elements; the weight and rstd are negligible); backward reads x and grad_y and writes
grad_x (3 M N); forward+backward 5 M N. Native forward is F.rms_norm (aten._fused_rms_norm on CUDA for one
dtype), native backward aten._fused_rms_norm_backward, the kernel autograd runs for it; torch.compile
compiles the same calls (inductor's decompositions, generated kernels). The sweep (lesson 05's "norms at every shape"): N from 256
to 65536 with M N = 2^22, 2^24 and 2^26 elements, and small batches (M = 1, 16, 64 at N = 4096)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks import sweep
from benchmarks.autograd import REPEAT, eager_step
from helpers import bench
from helpers.ops import extension
from helpers.ops import rmsnorm as rms

NS = (256, 1024, 4096, 8192, 16384, 32768, 65536)
EPS = 1e-6


def _grid(total: int) -> list[tuple[int, int]]:
    return [(total // n, n) for n in NS]


def liger_rms_norm():
    """Liger-Kernel's RMSNorm autograd Function (x, weight, eps, offset, casting_mode, in_place), or None where
    it cannot run (no GPU, liger-kernel not installed)."""
    if not torch.cuda.is_available():
        return None
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except ImportError:
        return None
    return lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)


SWEEP_SIZES = (1 << 22, 1 << 24, 1 << 26)  # the sweep's M N: the points every target below holds at


def targets(fwd_op: str, bwd_op: str, name: str):
    """The norms' targets as a report function over a sweep's rows, each point met or missed:
    - at the sweep's points (M N = 2^22, 2^24, 2^26): forward >= 0.97x torch.compile and backward >= 1.3x,
      and from 2^24 elements forward >= 90 % and backward >= 80 % of a copy;
    - small batches (M <= 64): forward, backward and forward+backward through autograd no slower than native;
    - everywhere Liger-Kernel was timed (forward and the eager step): faster than it.
    A missed point names the competitor's own % of a copy: at 100 % or more (a size L2 helps), beating it
    means beating the copy. The small batches' ratios to torch.compile are in the table, not targets.
    benchmarks/layernorm_grid.py uses it for LayerNorm."""
    step_op = f"{fwd_op.split()[0]} fwd+bwd autograd"

    def report(rows: list[dict]) -> str:
        by = {(r["op"], r["shape"], r["dtype"], r["impl"]): r for r in rows}
        lines, missed = [], 0
        for (op, shape, dtype, impl), r in by.items():
            if impl != "ours" or op not in (fwd_op, bwd_op, step_op):
                continue
            comp, nat, liger = (by.get((op, shape, dtype, who)) for who in ("torch.compile", "native", "Liger"))
            sweep_point = r["numel"] in SWEEP_SIZES
            checks = []
            if comp and sweep_point and op != step_op:
                checks.append(("vs compile", comp, 0.97 if op == fwd_op else 1.3))
            if sweep_point and r["numel"] >= 1 << 24 and op != step_op:
                checks.append(("% copy", None, 0.90 if op == fwd_op else 0.80))
            if r["rows"] <= 64 and nat:
                checks.append(("vs native", nat, 1.0))
            if liger:
                checks.append(("vs Liger", liger, 1.0))
            for what, them, want in checks:
                got = r["pct_copy"] / 100 if them is None else them["ms"] / r["ms"]
                if got < want:
                    missed += 1
                    theirs = "" if them is None else f" ({them['impl']} at {them['pct_copy']:.0f} % of copy)"
                    lines.append(f"  MISSED {op} {shape} {dtype}: {what} {got:.2f} < {want}{theirs}")
        return f"{name} targets: {missed} points missed\n" + "\n".join(lines)

    return report


report = targets("rms fwd", "rms bwd", "rmsnorm")


SPEC = sweep.Spec(
    gpu=_grid(1 << 24) + [(1, 4096), (16, 4096), (64, 4096)],
    gpu_more=_grid(1 << 22) + _grid(1 << 26),
    cpu=[(1024, 1024)],
    cpu_more=[(64, 8192)],
    report=report,
)


def native_backward(g, x, rstd, w):
    return torch.ops.aten._fused_rms_norm_backward(g, x, [x.shape[-1]], rstd, w, [True, True])


def measure(case: sweep.Case, graph: bool = False) -> list[dict]:
    """bench.compare rows of "rms fwd", "rms bwd" and "rms fwd+bwd autograd" at one case. graph=True times
    every call as a CUDA graph replay (bench.compare's graph): the GPU time of its kernels with no Python,
    dispatcher or autograd engine between them. Lesson 05 plots that, since an eager forward+backward of
    torch.compile's or Liger's function can take longer on the CPU than its kernels take on the GPU, and
    events around it then time the CPU. The suite (graph=False) times eager calls, as a caller meets them."""
    ext = extension("rmsnorm")
    m, n = case.shape
    x, g = case.randn(), case.randn(seed=1)
    w = case.randn((n,), seed=2)
    es, dev = case.element_size, case.device
    cuda = torch.device(dev).type == "cuda"
    native_fwd = lambda x, w: F.rms_norm(x, (n,), w, EPS)  # noqa: E731
    compiled_fwd = torch.compile(native_fwd, dynamic=False)
    liger = liger_rms_norm()
    fwd = {
        "ours": lambda: ext.forward(x, w, EPS),
        "native": lambda: native_fwd(x, w),
        "torch.compile": lambda: compiled_fwd(x, w),
    }
    if liger is not None:
        fwd["Liger"] = lambda: liger(x, w)
    rows = bench.compare(fwd, nbytes=2 * m * n * es, device=dev, graph=graph, op="rms fwd", **case.labels)

    _, rstd = ext.forward(x, w, EPS)
    bwd = {"ours": lambda: ext.backward(g, x, rstd, w)}
    if cuda:  # aten._fused_rms_norm_backward has a CUDA kernel only
        compiled_bwd = torch.compile(native_backward, dynamic=False)
        _, nrstd = torch.ops.aten._fused_rms_norm(x, [n], w, EPS)
        bwd |= {
            "native": lambda: native_backward(g, x, nrstd, w),
            "torch.compile": lambda: compiled_bwd(g, x, nrstd, w),
        }
    rows += bench.compare(bwd, nbytes=3 * m * n * es, device=dev, graph=graph, op="rms bwd", **case.labels)

    if m * n != 1 << 24 and m > 64 and cuda:  # the eager step at the headline sizes only (compiles are slow)
        return rows
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    compiled_step = torch.compile(native_fwd, dynamic=False)
    impls = {"ours": lambda x, w: rms.rms_norm(x, (n,), w, EPS), "native": native_fwd, "torch.compile": compiled_step}
    if liger is not None:
        impls["Liger"] = liger
    rows += bench.compare(
        {k: eager_step(f, (xg, wg), (xg, wg), g) for k, f in impls.items()},
        nbytes=5 * m * n * es,
        device=dev,
        graph=graph,
        op="rms fwd+bwd autograd",
        repeat=REPEAT if cuda else 1,  # a step of a small batch is CPU-bound: noisy, so medians of rounds
        **case.labels,
    )
    return rows
