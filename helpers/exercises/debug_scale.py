"""Self-check for lesson 07's second exercise: kernels/exercises/debug_scale.cuh, find and fix. y = a * x + b in
float32 by `ext.scale_shift_into(x, y, a, b)` (ext = loader.load("debugging")), four elements at a time: Part 1,
the CPU loop, checked on the CPU; Part 2, the float4 kernel, on a GPU.

What a wrong answer cannot get past:
* a write past the end (the last group of four when n is not a multiple of 4): y is NaN first, inside a guard
  buffer whose bytes must not change; sizes 1, 3, 257, 1151, 65539 and random ones;
* elements left unwritten: they stay NaN;
* a 32-bit index: a tensor of more than 2^31 elements (2^32 where the memory allows), checked at the start,
  across 2^31 (and 2^32) and at the end, where the GPU has the memory (2 tensors of 8 or 16 GiB);
* deleting the work: an empty kernel leaves NaN.
`check(sanitize=True)` first runs the GPU part under compute-sanitizer's memcheck in a child process and shows
its report."""

from __future__ import annotations

import torch

from .. import env, loader, selfcheck
from . import Wrong

OP = "debugging"
NAME = "debug_scale"
SENTINEL = -4096.0
PAD = 64  # guard elements each side: a multiple of 4, so that the view stays 16-byte aligned for float4


def reference(x: torch.Tensor, a: float, b: float) -> torch.Tensor:
    return (a * x.double() + b).float()


def _inputs(shape, dtype, device, g):
    x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    a, b = (float(torch.empty(()).uniform_(-3, 3, generator=g)) for _ in range(2))
    return selfcheck.guarded(x, PAD, float("nan")).view, a, b


def _large_inputs(numel, dtype, device, g):
    x = torch.empty(numel, dtype=dtype, device=device).uniform_(-2, 2, generator=g)
    return x, 1.5, -0.25


def _hint(device: torch.device) -> str:
    if device.type == "cpu":
        return "the loop writes four elements per step: what happens in the last step when n is not a multiple of 4?"
    return (
        "run check(sanitize=True): memcheck names the kernel, the line and the thread of a write past the end. "
        "A thread whose group of four runs past n must stop at n (one element at a time); and an index that can "
        "pass 2^31 needs 64 bits"
    )


def _call(ext, title: str, seed: int):
    def yours(x, a, b):
        y = selfcheck.guarded(torch.full(x.shape, float("nan"), device=x.device), PAD, SENTINEL)
        ext.scale_shift_into(x, y.view, a, b)
        outside = y.outside("y")
        if outside:
            selfcheck.fail(title, f"Case {x.numel()} float32 on {x.device}", outside, hint=_hint(x.device), seed=seed)
        return y.view

    return yours


def _large(ext):
    def yours(x, a, b):
        y = torch.empty_like(x)
        ext.scale_shift_into(x, y, a, b)
        return y

    return yours


@selfcheck.sanitizable
def check(device=None, ext=None, seed=None) -> int:
    """Your y = a * x + b against float64: the CPU loop (Part 1), and on a GPU the kernel (Part 2), also on a
    tensor of more than 2^31 elements where the GPU has the memory. sanitize=True first runs the GPU part under
    compute-sanitizer's memcheck in a child process and shows the report."""
    seed = selfcheck.new_seed(seed)
    ext = ext or loader.load(OP)
    cases = 0
    with selfcheck.exercise(NAME):
        for dev in selfcheck.parts(device):
            title = f"y = a * x + b, {'the kernel (Part 2)' if dev.type == 'cuda' else 'the CPU loop (Part 1)'}"
            cases += selfcheck.run(
                title,
                _call(ext, title, seed),
                reference,
                _inputs,
                device=dev,
                dtypes=(torch.float32,),
                hint=_hint(dev),
                seed=seed,
            )
            if dev.type == "cuda":
                selfcheck.large_case(
                    title,
                    _large(ext),
                    reference,
                    _large_inputs,
                    dtype=torch.float32,
                    buffers=2,
                    hint=_hint(dev),
                    seed=seed,
                )
        if not env.cuda_mode():
            print("ℹ️  y = a * x + b, the kernel (Part 2): checked on a GPU only; skipped.")
    return cases


WRONG = [
    Wrong(
        "the CPU loop's last partial group dropped (no loop for the n % 4 elements left)",
        [("  for (; i < n; ++i) y[i] = a * x[i] + b;  // the last n % 4 elements\n", "")],
        "cpu",
    ),
    Wrong(
        "the CPU loop still steps by four while i < n, writing past the end",
        [("  for (; i + 4 <= n; i += 4) {", "  for (; i < n; i += 4) {")],
        "cpu",
    ),
    Wrong(
        "the CPU loop's remainder starts four past the last full group: the last n % 4 elements stay unwritten",
        [
            (
                "  for (; i < n; ++i) y[i] = a * x[i] + b;  // the last n % 4 elements\n",
                "  for (i += 4; i < n; ++i) y[i] = a * x[i] + b;\n",
            )
        ],
        "cpu",
    ),
    Wrong(
        "the tail fixed, but the index still a 32-bit int (negative past 2^31 elements)",
        [
            (
                "  const int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * 4;  // 64 bits: n may pass 2^31",
                "  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;",
            )
        ],
        "cuda",
        min_free_gib=22,
    ),
    Wrong(
        "the index in 64 bits, but the last thread still stores a whole float4 past the end",
        [("  if (i + 4 <= n) {", "  if (i < n) {")],
        "cuda",
    ),
    Wrong(
        "the tail handled for the last thread, but with <= (one element past the end)",
        [
            (
                "    for (int64_t k = i; k < n; ++k) y[k] = a * x[k] + b;  // the last thread's partial group",
                "    for (int64_t k = i; k <= n && k < i + 4; ++k) y[k] = a * x[k] + b;",
            )
        ],
        "cuda",
    ),
]
