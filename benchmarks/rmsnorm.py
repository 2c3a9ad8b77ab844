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


def measure(case: sweep.Case) -> list[dict]:
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
    rows = bench.compare(fwd, nbytes=2 * m * n * es, device=dev, op="rms fwd", **case.labels)

    _, rstd = ext.forward(x, w, EPS)
    bwd = {"ours": lambda: ext.backward(g, x, rstd, w)}
    if cuda:  # aten._fused_rms_norm_backward has a CUDA kernel only
        compiled_bwd = torch.compile(native_backward, dynamic=False)
        _, nrstd = torch.ops.aten._fused_rms_norm(x, [n], w, EPS)
        bwd |= {
            "native": lambda: native_backward(g, x, nrstd, w),
            "torch.compile": lambda: compiled_bwd(g, x, nrstd, w),
        }
    rows += bench.compare(bwd, nbytes=3 * m * n * es, device=dev, op="rms bwd", **case.labels)

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
        op="rms fwd+bwd autograd",
        repeat=REPEAT if cuda else 1,  # a step of a small batch is CPU-bound: noisy, so medians of rounds
        **case.labels,
    )
    return rows


# Build-time settings of kernels/norm_engine/rmsnorm_common.cuh compared by `python -m benchmarks.rmsnorm --settings`: each
# builds the extension with that -D and times forward v2 and backward v2 at the shapes the setting changes.
SETTINGS = {
    "default": [],
    "no thread block clusters": ["-DRMSNORM_NO_CLUSTERS"],
    "no clusters, forward 16 values per thread at most": ["-DRMSNORM_NO_CLUSTERS", "-DRMSNORM_FWD_MAX_VALUES=16"],
    "backward next row always prefetched": ["-DRMSNORM_BWD_NO_PREFETCH_FROM=1000"],
    "forward clusters of 64 kB slices": ["-DRMSNORM_FWD_SLICE_BYTES=65536"],
    "forward clusters of 32 kB slices": ["-DRMSNORM_FWD_SLICE_BYTES=32768"],
    "backward long rows by the long-row pair (no bulk copies)": ["-DRMSNORM_NO_BULK"],
    "bulk-copy ring 16 bytes off 128-byte alignment": ["-DRMSNORM_BULK_RING_OFFSET=16"],
    "bulk-copy ring of up to 6 stages": ["-DRMSNORM_BULK_STAGES=6"],
    "bulk copies without the next row's early pass 1": ["-DRMSNORM_BULK_PIPE_FROM=99"],
    "bulk copies for every row from 8192": ["-DRMSNORM_BULK_FROM=8192"],
    "bulk copies, 2-byte rows by 1024-thread blocks": ["-DRMSNORM_BULK_NARROW=0"],
    "bulk copies, 2-byte rows by 256-thread blocks": ["-DRMSNORM_BULK_NARROW=256"],
    "forward long rows without bulk copies": ["-DRMSNORM_NO_FWD_BULK"],
    "forward bulk copies by 1024-thread blocks": ["-DRMSNORM_FWD_BULK_THREADS=1024"],
    "forward bulk copies over clusters of 2 blocks at least": ["-DRMSNORM_FWD_BULK_MIN_CLUSTER=2"],
    "backward rows up to 8192 without lesson 03's rounds by bulk copy": ["-DRMSNORM_NO_ROUNDS"],
    "backward rounds by bulk copy for 2-byte rows only": ["-DRMSNORM_ROUNDS_NO_FLOAT"],
    "backward rounds by bulk copy at any size, from 1 row": ["-DRMSNORM_ROUNDS_BYTES=0"],
    "bulk-copy kernels with a cluster barrier at the end": ["-DRMSNORM_BULK_END_SYNC"],
    "backward 2-byte rows of 16384 in registers (not bulk copies)": ["-DRMSNORM_BULK_2BYTE_FROM=0"],
    "backward bulk copies, 2-byte rows of 4 packs per thread": ["-DRMSNORM_BULK_NARROW_PACKS=4"],
    "bulk-copy rings started with all their stages at once": ["-DRMSNORM_BULK_FIRST_ROWS=0"],
}
SETTING_SHAPES = [
    (1024, 16384),
    (512, 32768),
    (256, 65536),
    (2048, 32768),
    (4096, 4096),
    (64, 65536),
    (128, 131072),
    (64, 262144),
]


def settings(
    only: list[str] | None = None, backward_only: bool = False, shapes: list[tuple[int, int]] | None = None
) -> list[dict]:
    """`only`: the settings whose names contain one of these words (and "default"); all by default.
    `shapes`: (M, N) pairs (default SETTING_SHAPES)."""
    from helpers import loader

    rows = []
    chosen = {k: v for k, v in SETTINGS.items() if k == "default" or not only or any(w in k for w in only)}
    exts = {name: loader.load("rmsnorm", extra_cuda_cflags=flags) for name, flags in chosen.items()}
    for dtype in (torch.float32, torch.bfloat16):
        for m, n in shapes or SETTING_SHAPES:
            case = sweep.Case((m, n), dtype, "cuda")
            x, g, w = case.randn(), case.randn(seed=1), case.randn((n,), seed=2)
            rstd = exts["default"].forward(x, w, EPS)[1]
            es = case.element_size
            fwd = {name: (lambda e: lambda: e.forward(x, w, EPS))(e) for name, e in exts.items()}
            bwd = {name: (lambda e: lambda: e.backward(g, x, rstd, w))(e) for name, e in exts.items()}
            if not backward_only:
                rows += bench.compare(fwd, nbytes=2 * m * n * es, device="cuda", op="rms fwd", repeat=3, **case.labels)
            rows += bench.compare(bwd, nbytes=3 * m * n * es, device="cuda", op="rms bwd", repeat=3, **case.labels)
    for r in rows:
        print(
            f"{r['op']:8} {r['shape']:>11} {r['dtype']:9} {r['impl']:50} {r['ms'] * 1000:8.1f} us {r['pct_copy']:5.1f} %"
        )
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="RMSNorm build settings compared (the sweep is benchmarks.run's)")
    parser.add_argument("--settings", action="store_true", help="time forward and backward under each setting")
    parser.add_argument("--only", nargs="*", metavar="WORD", help="the settings whose names contain a WORD")
    parser.add_argument("--backward", action="store_true", help="backward only")
    parser.add_argument("--shapes", nargs="*", metavar="MxN", help="shapes to time (default: the long rows)")
    args = parser.parse_args()
    if args.settings:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else None
        settings(args.only, backward_only=args.backward, shapes=shapes)
