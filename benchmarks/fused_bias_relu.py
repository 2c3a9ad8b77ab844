"""Lesson 02: y = relu(x * scale + bias), forward and forward+backward (grad_x and grad_bias).

Bytes counted: forward reads x and writes y (2 N elements); forward+backward adds reading grad_y and
y and writing grad_x (5 N in all), plus the bias and its gradient (C each). The rows come from
helpers.ops.fused_bias_relu.timings, which the notebook uses too."""

from __future__ import annotations

import torch

from helpers.ops import fused_bias_relu as fbr

HEADLINE = [(4096, 4096), (8192, 8192), (32768, 1024)]
SWEEP = [(1024, 1024), (2048, 2048), (65536, 256), (1 << 20, 64)]


def sweep(device: str = "cuda", quick: bool = False) -> list[dict]:
    shapes = HEADLINE if device == "cuda" else [(1024, 1024)]
    if not quick:
        shapes = shapes + (SWEEP if device == "cuda" else [(256, 256), (4096, 256)])
    return fbr.timings(shapes, (torch.float32, torch.bfloat16), device, progress=True)
