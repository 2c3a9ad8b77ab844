"""Lesson 02: y = relu(x * scale + bias), forward and forward+backward (grad_x and grad_bias).

Bytes counted: forward reads x and writes y (2 N elements); forward+backward adds reading grad_y and
y and writing grad_x (5 N in all), plus the bias and its gradient (C each). The rows come from
helpers.ops.fused_bias_relu.timings, which the notebook uses too. "ours" is forward v3 and the C++
autograd Function saving a bit mask (it moves 4 N elements and 2 bits per element, so it can pass 100%
of the counted bytes' copy); "ours, saves y" the same Function saving y. On a GPU, "fbr fwd+bwd" is a
CUDA graph replay of the step and "fbr fwd+bwd eager" the calls from Python; the targets (>= 90% of a
copy, >= 0.97x torch.compile at 4096x4096 and 8192x8192) are printed after the sweep."""

from __future__ import annotations

import torch

from helpers.ops import fused_bias_relu as fbr

HEADLINE = [(4096, 4096), (8192, 8192), (32768, 1024)]
SWEEP = [(1024, 1024), (2048, 2048), (65536, 256), (1 << 20, 64)]


def sweep(device: str = "cuda", quick: bool = False) -> list[dict]:
    shapes = HEADLINE if device == "cuda" else [(1024, 1024)]
    if not quick:
        shapes = shapes + (SWEEP if device == "cuda" else [(256, 256), (4096, 256)])
    rows = fbr.timings(shapes, (torch.float32, torch.bfloat16), device, progress=True)
    if device == "cuda":  # the headline: lesson 02's targets (issue 3) on this card
        print(fbr.targets(rows), flush=True)
    return rows
