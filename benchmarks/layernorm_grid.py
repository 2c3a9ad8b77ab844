"""The norms' sweep for LayerNorm (lesson 05's "norms at every shape"): the same grid as benchmarks/rmsnorm.py,
N from 256 to 65536 with M N = 2^22, 2^24 and 2^26 elements, and small batches (M = 1, 16, 64 at N = 4096),
forward, backward and forward+backward through autograd, against native PyTorch, torch.compile and
Liger-Kernel's LayerNorm (forward and the eager step; GPU only, where liger-kernel is installed).

    python -m benchmarks.run --ops layernorm_grid --quick      # M N = 2^24 and the small batches
    python -m benchmarks.run --ops layernorm_grid              # + 2^22 and 2^26

"ours" is the op, torch.ops.course.layer_norm_forward and layer_norm_backward: the norm engine or lesson 03's forward v3
and backward v2 with kernel="auto", by shape and GPU (kernels/layernorm/layernorm.route.cu's table). Bytes counted
as in benchmarks/layernorm.py: forward 2 M N elements, backward 3 M N, forward+backward 5 M N. Lesson 03's own headline shapes and every kernel version
stay in benchmarks/layernorm.py; this module is the grid and its targets (`report`: benchmarks.rmsnorm.targets)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks import sweep
from benchmarks.autograd import REPEAT, eager_step, liger_layer_norm
from benchmarks.layernorm import native_backward
from benchmarks.rmsnorm import _grid, targets
from helpers import bench
from helpers.ops import extension
from helpers.ops import layernorm as ln

EPS = 1e-5

SPEC = sweep.Spec(
    gpu=_grid(1 << 24) + [(1, 4096), (16, 4096), (64, 4096)],
    gpu_more=_grid(1 << 22) + _grid(1 << 26),
    cpu=[(1024, 1024)],
    cpu_more=[(64, 8192)],
    report=targets("ln fwd", "ln bwd", "layernorm"),
)


def measure(case: sweep.Case) -> list[dict]:
    extension("layernorm")  # loads the op: course::layer_norm_forward and layer_norm_backward
    m, n = case.shape
    x, g = case.randn(), case.randn(seed=1)
    w, b = case.randn((n,), seed=2), case.randn((n,), seed=3)
    es, dev = case.element_size, case.device
    cuda = torch.device(dev).type == "cuda"
    native_fwd = lambda x, w, b: F.layer_norm(x, (n,), w, b, EPS)  # noqa: E731
    compiled_fwd = torch.compile(native_fwd, dynamic=False)
    liger = liger_layer_norm() if cuda else None
    fwd = {
        "ours": lambda: torch.ops.course.layer_norm_forward(x, [n], w, b, EPS),
        "native": lambda: native_fwd(x, w, b),
        "torch.compile": lambda: compiled_fwd(x, w, b),
    }
    if liger is not None:
        fwd["Liger"] = lambda: liger(x, w, b, EPS)
    rows = bench.compare(fwd, nbytes=2 * m * n * es, device=dev, op="ln fwd", **case.labels)

    _, mean, rstd = torch.ops.course.layer_norm_forward(x, [n], w, b, EPS)
    _, nmean, nrstd = torch.native_layer_norm(x, [n], w, b, EPS)
    compiled_bwd = torch.compile(native_backward, dynamic=False)
    bwd = {
        "ours": lambda: torch.ops.course.layer_norm_backward(g, x, [n], mean, rstd, w, b, [True, True, True]),
        "native": lambda: native_backward(g, x, nmean, nrstd, w, b),
        "torch.compile": lambda: compiled_bwd(g, x, nmean, nrstd, w, b),
    }
    rows += bench.compare(bwd, nbytes=3 * m * n * es, device=dev, op="ln bwd", **case.labels)

    if m * n != 1 << 24 and m > 64 and cuda:  # the eager step at the headline sizes only (compiles are slow)
        return rows
    xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))
    compiled_step = torch.compile(native_fwd, dynamic=False)
    impls = {"ours": lambda x, w, b: ln.layer_norm(x, w, b, EPS), "native": native_fwd, "torch.compile": compiled_step}
    if liger is not None:
        impls["Liger"] = lambda x, w, b: liger(x, w, b, EPS)
    rows += bench.compare(
        {k: eager_step(f, (xg, wg, bg), (xg, wg, bg), g) for k, f in impls.items()},
        nbytes=5 * m * n * es,
        device=dev,
        op="ln fwd+bwd autograd",
        repeat=REPEAT if cuda else 1,  # a step of a small batch is CPU-bound: noisy, so medians of rounds
        **case.labels,
    )
    return rows
