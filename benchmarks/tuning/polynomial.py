"""Lesson 01 kernels alone: forward v1 and v2, backward v1 (grad_x) and v2 with and without the coefficient
reductions, as % of a same-size copy; v1 forward and backward are the exercises, built from their solutions.

    python3 -m benchmarks.tuning.polynomial"""

import os

import torch

from helpers import bench, loader

os.environ["COURSE_SOLUTIONS"] = "1"
ext = loader.load("polynomial")
c = torch.tensor([1.5, 0.5, -2.0, 0.25], device="cuda")
for dtype in (torch.float32, torch.bfloat16):
    for shape in ((4096, 4096), (8192, 8192)):
        x = torch.randn(shape, device="cuda", dtype=dtype)
        g = torch.randn_like(x)
        fns = {
            "fwd v1": lambda: ext.forward(x, c, 1),
            "fwd v2": lambda: ext.forward(x, c, 2),
            "bwd v2 gx only": lambda: ext.backward(g, x, c, False, 2),
            "bwd v2 +coeffs": lambda: ext.backward(g, x, c, True, 2),
            "bwd v1": lambda: ext.backward(g, x, c, False, 1),
        }
        rows = []
        for k, f in fns.items():
            nb = (2 if k.startswith("fwd") else 3) * x.numel() * x.element_size()
            rows += bench.compare({k: f}, nbytes=nb, op="micro", shape=shape, dtype=dtype)
        print(bench.table(rows))
