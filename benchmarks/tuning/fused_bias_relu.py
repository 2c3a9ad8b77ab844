"""Lesson 02 micro-benchmark: forward v2 / v3 / torch.compile, the backward kernel alone, and
forward+backward through the C++ Function and torch.compile, at 4096x4096 and 8192x8192 in float32 and
bfloat16, each as % of a same-size copy (helpers.bench.compare: CUDA events, L2 flushed, medians).

    python3 diag/fbr_micro.py      # from the repo root, on a GPU; well under 2 minutes
"""

import os
import sys
import time

sys.path.insert(0, ".")
os.environ["COURSE_SOLUTIONS"] = "1"

import torch  # noqa: E402

from helpers import bench, loader  # noqa: E402
from helpers.ops import fused_bias_relu as fbr  # noqa: E402

SCALE = 2.0
start = time.perf_counter()
ext = loader.load("fused_bias_relu")
print(f"built/loaded in {time.perf_counter() - start:.1f}s; {torch.cuda.get_device_name()}", flush=True)


def fwd_bwd(f, x, b, g):
    def run():
        torch.autograd.grad(f(x, b), (x, b), g)

    return run


summary = []
for dtype in (torch.float32, torch.bfloat16):
    for shape in ((4096, 4096), (8192, 8192)):
        torch._dynamo.reset()
        comp = torch.compile(fbr.reference, dynamic=False)
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
        b = torch.randn(shape[-1], device="cuda", dtype=dtype, generator=gen)
        g = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
        y = ext.forward(x, b, SCALE)
        n, c, es = x.numel(), shape[-1], x.element_size()
        labels = dict(op="fbr", shape="x".join(map(str, shape)), dtype=str(dtype).replace("torch.", ""))
        rows = bench.compare(
            {
                "fwd v2": lambda: ext.forward(x, b, SCALE, 2),
                "fwd v3": lambda: ext.forward(x, b, SCALE, 3),
                "fwd compile": lambda: comp(x, b, SCALE),
            },
            nbytes=(2 * n + c) * es,
            **labels,
        )
        rows += bench.compare(
            {
                "bwd kernel (y)": lambda: ext.backward_from_mask(g, y, SCALE, True),
                "bwd kernel no gb": lambda: ext.backward_from_mask(g, y, SCALE, False),
            },
            nbytes=(3 * n + c) * es,
            **labels,
        )
        xg, bg = x.clone().requires_grad_(), b.clone().requires_grad_()
        rows += bench.compare(
            {
                "f+b C++ Function": fwd_bwd(lambda x, b: ext.fused_bias_relu(x, b, SCALE), xg, bg, g),
                "f+b Python Func": fwd_bwd(lambda x, b: fbr.fused_bias_relu_python(x, b, SCALE, ext=ext), xg, bg, g),
                "f+b compile": fwd_bwd(lambda x, b: comp(x, b, SCALE), xg, bg, g),
            },
            nbytes=(5 * n + 3 * c) * es,
            **labels,
        )
        print(bench.table(rows), flush=True)
        by = {r["impl"]: r for r in rows}
        summary.append(
            f"{labels['shape']:<10} {labels['dtype']:<9} fwd v3 {by['fwd v3']['pct_copy']:5.1f}% "
            f"({by['fwd compile']['ms'] / by['fwd v3']['ms']:.2f}x compile)   "
            f"f+b C++ {by['f+b C++ Function']['pct_copy']:5.1f}% "
            f"({by['f+b compile']['ms'] / by['f+b C++ Function']['ms']:.2f}x compile)"
        )
print("\ntargets: >= 90% of copy and >= 0.97x torch.compile")
print("\n".join(summary))
print(f"total {time.perf_counter() - start:.0f}s")
