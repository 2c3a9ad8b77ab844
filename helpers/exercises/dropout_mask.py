"""Self-check for lesson 05's second exercise: kernels/exercises/dropout_mask.cuh, the keep decision and scaling
of a group of 4 elements (`ext.forward(x, p, seed, offset)`, ext = loader.load("dropout_mask")). The same
function runs on the CPU and, in CUDA mode, on the GPU: both are checked, bit for bit against the mask that
course::dropout's kernels draw (kernels/common/philox.cuh)."""

from __future__ import annotations

import torch

from .. import loader, selfcheck
from ..ops import dropout as _dropout
from ..ops import extension
from . import Wrong

OP = "dropout_mask"


def _uniform(g, lo, hi) -> float:
    return float(torch.empty(()).uniform_(lo, hi, generator=g))


def _draw(g) -> tuple[int, int]:
    """A 63-bit seed and an offset of one of the first 2^40 calls (a multiple of 4), drawn per case."""
    seed = int(torch.randint(0, 1 << 62, (1,), generator=g)) * 2 + int(torch.randint(0, 2, (1,), generator=g))
    return seed, 4 * int(torch.randint(1, 1 << 40, (1,), generator=g))


def reference(x, p, seed, offset):
    """What course::dropout gives with this (seed, offset): philox::keep element by element (the dropout op's
    keep_mask, a CPU loop), then x / (1 - p) where kept, rounded once to x's dtype (helpers.ops.dropout.expected)."""
    keep = extension("dropout").keep_mask(seed, offset, x.numel(), p).reshape(x.shape).to(x.device)
    return _dropout.expected(x, keep, p)


def _inputs(shape, dtype, device, g):
    """x with random scale; p in 0.05..0.95; a random seed and offset."""
    x = torch.randn(shape, generator=g) * 10 ** _uniform(g, -1, 1)
    return (x.to(device=device, dtype=dtype), _uniform(g, 0.05, 0.95), *_draw(g))


def _exact(p):
    def make(shape, dtype, device, g):
        x, _, seed, offset = _inputs(shape, dtype, device, g)
        return x, p, seed, offset

    return make


def _huge(shape, dtype, device, g):
    """Values up to 1e30 and p = 0.5: a dropped element is 0 whatever its value."""
    x, _, seed, offset = _inputs(shape, dtype, device, g)
    return x * 1e29, 0.5, seed, offset


@selfcheck.sanitizable
def check(device=None, ext=None, seed=None) -> int:
    """forward(x, p, seed, offset) against the course's mask on every part: the CPU, and in CUDA mode the GPU
    (the same function of yours). Every dtype and shape with random x, p, seed and offset, then p = 0 (a copy of
    x), p = 1 (zeros: no NaN), two calls with the same seed at offsets 4 apart (different masks), and huge
    values."""
    ext = ext or loader.load(OP)
    hint = (
        "r = philox::draw4(seed, offset, group) gives one word per element: element k is kept when "
        "philox::keeps(r.v[k], philox::drop_threshold(p)); then y[k] = kept ? x[k] * (1 / (1 - p)) : 0; see "
        "kernels/exercises/dropout_mask.cuh"
    )
    cases = 0
    with selfcheck.exercise("dropout_mask"):
        for dev in selfcheck.parts(device):
            where = "on the GPU (dropout_mask_v1_kernel)" if dev.type == "cuda" else "on the CPU"
            cases += selfcheck.run(
                f"dropout_group4 {where}",
                ext.forward,
                reference,
                _inputs,
                device=dev,
                seed=seed,
                hint=hint,
                special=[
                    selfcheck.Case("p = 0: every element kept, y == x exactly", (3, 1001), torch.float32, _exact(0.0)),
                    selfcheck.Case(
                        "p = 1: every element dropped, y == 0 exactly (scale = 1 / (1 - p) is inf there: "
                        "x * 0 * inf is NaN, so choose 0 for a dropped element rather than multiplying by the mask)",
                        (3, 1001),
                        torch.float32,
                        _exact(1.0),
                    ),
                    selfcheck.Case(
                        "huge values: a dropped element is 0, and a kept one x / (1 - p)",
                        (257,),
                        torch.float32,
                        _huge,
                    ),
                ],
            )
            cases += _next_call_differs(ext, dev, selfcheck.new_seed(seed), hint)
    return cases


def _next_call_differs(ext, dev, seed, hint) -> int:
    """The next dropout call (offset + 4, the same seed) must draw another mask: the offset is part of the counter."""
    g = torch.Generator().manual_seed(seed)
    x = torch.ones(4096, device=dev)
    s, offset = _draw(g)
    a, b = ext.forward(x, 0.5, s, offset), ext.forward(x, 0.5, s, offset + 4)
    name = f"dropout_group4 {'on the GPU' if dev.type == 'cuda' else 'on the CPU'}"
    if torch.equal(a, b):
        selfcheck.fail(
            name,
            f"Two calls with seed {s} at offsets {offset} and {offset + 4} on {dev}",
            "both calls dropped the same elements: the offset must go into the counter, or every training step "
            "drops the same units",
            hint=hint,
            seed=seed,
        )
    return 1


_DRAW = "  const philox::Words4 r = philox::draw4(seed, offset, group);"
_KEEP = "  for (int k = 0; k < 4; ++k) y[k] = philox::keeps(r.v[k], threshold) ? x[k] * scale : acc_t(0);"

WRONG = [
    Wrong("no 1 / (1 - p) scaling of the kept elements", [(_KEEP, _KEEP.replace("x[k] * scale", "x[k]"))], "cpu"),
    Wrong(
        "keeps an element with probability p (word < threshold) instead of 1 - p",
        [(_KEEP, _KEEP.replace("philox::keeps(r.v[k], threshold)", "r.v[k] < threshold"))],
        "cpu",
    ),
    Wrong("one random word for all 4 elements", [(_KEEP, _KEEP.replace("r.v[k]", "r.v[0]"))], "cpu"),
    Wrong(
        "ignores the offset: every call draws the same mask",
        [(_DRAW, _DRAW.replace("offset, group", "0, group"))],
        "cpu",
    ),
    Wrong(
        "multiplies by the mask: p = 1 gives 0 * inf = NaN",
        [(_KEEP, "  for (int k = 0; k < 4; ++k) y[k] = x[k] * acc_t(philox::keeps(r.v[k], threshold)) * scale;")],
        "cpu",
    ),
]
