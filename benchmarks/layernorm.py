"""Lesson 03: LayerNorm over the last dimension, forward and backward, every version.

"ours" is the op, torch.ops.course.layer_norm_forward and layer_norm_backward (kernels/layernorm/layernorm.route.cu
picks the norm engine or lesson 03's forward v3 and backward v2 with kernel="auto": on an H100 in bfloat16 the
engine's forward at 4096x4096 and the ladder's bulk-copy backward with the split grid barrier); "ours v2" and
"ours v1" are the ladder's earlier rungs; benchmarks/tuning/layernorm.py times each named kernel of v3 and v2.
Bytes counted: forward reads x and writes y (2 M N elements; weight, bias, mean and rstd are negligible);
backward reads x and grad_y and writes grad_x (3 M N; the weight and the two [N] gradients are negligible).
Native backward is aten.native_layer_norm_backward, the kernel(s) autograd runs for F.layer_norm; its
torch.compile counterpart is the same call compiled (inductor's decomposition, generated kernels).
On the GPU every implementation and the copy are timed in turn three times over and the medians reported
(bench.compare(repeat=3)): one timing of a 30 us kernel, or of the copy it is compared with, can be a few
percent off."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from helpers import bench
from helpers.ops import extension

HEADLINE = [(4096, 4096), (32768, 1024), (8192, 8192)]
SWEEP = [((1 << 24) // n, n) for n in (256, 512, 2048, 16384, 65536)]  # 16M elements, rows of 256 to 65536
EPS = 1e-5
REPEAT = 3  # on the GPU


def native_backward(g, x, mean, rstd, w, b):
    n = x.shape[-1]
    return torch.ops.aten.native_layer_norm_backward(g, x, [n], mean, rstd, w, b, [True, True, True])


def cases(device: str, quick: bool):
    shapes = HEADLINE if device == "cuda" else [(1024, 1024)]
    if not quick:
        shapes = shapes + (SWEEP if device == "cuda" else [(64, 8192)])
    for dtype in (torch.float32, torch.bfloat16):
        for shape in shapes:
            yield shape, dtype


def sweep(device: str = "cuda", quick: bool = False) -> list[dict]:
    ext = extension("layernorm")
    rows = []
    for (m, n), dtype in cases(device, quick):
        torch._dynamo.reset()  # a fresh compile per shape: no recompile limit, no dynamic shapes
        compiled_fwd = torch.compile(lambda x, w, b: F.layer_norm(x, (n,), w, b, EPS), dynamic=False)
        compiled_bwd = torch.compile(native_backward, dynamic=False)
        x = torch.randn(m, n, device=device, dtype=dtype)
        w = torch.randn(n, device=device, dtype=dtype)
        b = torch.randn(n, device=device, dtype=dtype)
        g = torch.randn_like(x)
        es = x.element_size()
        labels = dict(shape=f"{m}x{n}", dtype=str(dtype).replace("torch.", ""), numel=m * n, rows=m, cols=n)
        fwd = {
            "ours": lambda: torch.ops.course.layer_norm_forward(x, [n], w, b, EPS),
            "ours v2": lambda: ext.forward(x, w, b, EPS, 2),
            "ours v1": lambda: ext.forward(x, w, b, EPS, 1),
            "native": lambda: F.layer_norm(x, (n,), w, b, EPS),
            "torch.compile": lambda: compiled_fwd(x, w, b),
        }
        repeat = REPEAT if device == "cuda" else 1
        rows += bench.compare(fwd, nbytes=2 * m * n * es, device=device, op="ln fwd", repeat=repeat, **labels)
        _, mean, rstd = torch.ops.course.layer_norm_forward(x, [n], w, b, EPS)
        _, nmean, nrstd = torch.native_layer_norm(x, [n], w, b, EPS)
        bwd = {
            "ours": lambda: torch.ops.course.layer_norm_backward(g, x, [n], mean, rstd, w, b, [True, True, True]),
            "ours v1": lambda: ext.backward(g, x, mean, rstd, w, 1),
            "native": lambda: native_backward(g, x, nmean, nrstd, w, b),
            "torch.compile": lambda: compiled_bwd(g, x, nmean, nrstd, w, b),
        }
        rows += bench.compare(bwd, nbytes=3 * m * n * es, device=device, op="ln bwd", repeat=repeat, **labels)
        print(f"  {labels['shape']:>12} {labels['dtype']}", flush=True)
    return rows
