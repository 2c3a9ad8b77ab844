"""Self-check for lesson 02's glue exercise: kernels/exercises/bias_check.h, the check of bias's shape that
kernels/fused_bias_relu/fused_bias_relu.cpp turns into a ValueError. Calls the op (ext = loader.load("fused_bias_relu")) with
shapes drawn at random: bias of shape [C] for x of shape [..., C] must work, every other bias shape must raise
a ValueError whose message names `bias`, the expected shape [C] and the shape it got."""

from __future__ import annotations

import torch

from .. import check as _check
from .. import loader, selfcheck
from ..ops import fused_bias_relu as fbr
from . import Wrong

OP = "fused_bias_relu"
NAME = "bias shape check (C++ glue)"


def _shape_str(shape) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def _draw(g, lo, hi) -> int:
    return int(torch.randint(lo, hi, (1,), generator=g))


def _good_shapes(g):
    out = []
    for dims in (1, 2, 3, 2):
        c = _draw(g, 1, 300)
        lead = [_draw(g, 1, 40) for _ in range(dims - 1)]
        if lead and lead[0] == c:
            lead[0] += 1  # x's first and last dimensions differ: a check of the wrong one shows
        out.append((tuple(lead) + (c,), (c,)))
    return out


def _bad_shapes(g):
    """(x shape, bias shape, what is wrong with it); drawn sizes, x's first dimension never equal to C."""
    c = _draw(g, 2, 300)
    rows = c + _draw(g, 1, 30)
    return [
        ((rows, c), (c, 1), "bias of shape [C, 1]: the right number of values, one dimension too many"),
        ((rows, c), (_draw(g, 2, 6), c), "bias of shape [k, C]: one bias per row is not what this op takes"),
        ((rows, c), (c + _draw(g, 1, 5),), "bias longer than C"),
        ((rows, c), (c - _draw(g, 1, c),), "bias shorter than C"),
        ((rows, c), (rows,), "bias matching x's first dimension, not its last"),
        ((3, rows, c), (), "a 0-d bias (a single number as a tensor)"),
        ((rows, c), (1, c), "bias of shape [1, C]: it broadcasts over x, but the op takes [C]"),
        ((rows, c), (1,), "bias of shape [1]: it broadcasts to every column, but the op takes [C]"),
    ]


def check(device=None, ext=None, seed=None) -> int:
    """Good shapes run and match the reference; bad ones raise ValueError naming bias, [C] and what it got."""
    ext = ext or loader.load(OP)
    seed = selfcheck.new_seed(seed)
    g = torch.Generator().manual_seed(seed)
    hint = (
        'return "" when bias_dim == 1 and bias_sizes[0] == x_sizes[x_dim - 1], else a message like '
        '"bias must have shape [C] = [64] to match x\'s last dimension, got [3, 64]" (build the shapes with '
        "std::to_string and sizes_str); see kernels/exercises/bias_check.h"
    )
    cases = 0
    with selfcheck.exercise("bias_check"):
        for dev in selfcheck.parts(device):
            for x_shape, b_shape in _good_shapes(g):
                x = torch.randn(x_shape, generator=g).to(dev)
                bias, scale = torch.randn(b_shape, generator=g).to(dev), float(torch.rand((), generator=g) + 0.5)
                where = f"x of shape {_shape_str(x_shape)}, bias of shape {_shape_str(b_shape)} on {dev}"
                try:
                    y = ext.forward(x, bias, scale)
                except (ValueError, RuntimeError) as e:
                    selfcheck.fail(NAME, where, f"a bias that fits was rejected: {e}", hint=hint, seed=seed)
                try:
                    _check.assert_close(y, fbr.expected(x, bias, scale), name="y")
                except AssertionError as e:
                    selfcheck.fail(NAME, where, str(e), hint=hint, seed=seed)
                cases += 1
            for x_shape, b_shape, why in _bad_shapes(g):
                x = torch.randn(x_shape, generator=g).to(dev)
                bias = torch.randn(b_shape, generator=g).to(dev)
                where = f"x of shape {_shape_str(x_shape)}, bias of shape {_shape_str(b_shape)} on {dev}"
                c, got = _shape_str(x_shape[-1:]), _shape_str(b_shape)
                try:
                    ext.forward(x, bias, 1.0)
                except ValueError as e:
                    msg = str(e).splitlines()[0]
                    missing = [w for w in ("bias", c, got) if w not in msg]
                    if missing:
                        selfcheck.fail(
                            NAME,
                            where,
                            f"the ValueError says {msg!r}, which does not mention {', '.join(missing)}: a message "
                            f"names the argument (bias), what was expected ({c}) and what it got ({got})",
                            hint=hint,
                            seed=seed,
                            why=why,
                        )
                except RuntimeError as e:
                    selfcheck.fail(
                        NAME,
                        where,
                        f"your check let it through (the op's safety net caught it: {e})",
                        hint=hint,
                        seed=seed,
                        why=why,
                    )
                else:
                    selfcheck.fail(NAME, where, "no error: it was accepted", hint=hint, seed=seed, why=why)
                cases += 1
        selfcheck.passed_now(NAME, f"all {cases} shapes handled (good ones run, bad ones named in a ValueError).")
    return cases


_CHECK = "  if (bias_dim != 1 || bias_sizes[0] != c)\n"

WRONG = [
    Wrong(
        "compares bias with x's first dimension instead of its last (C)",
        [("const int64_t c = x_sizes[x_dim - 1];", "const int64_t c = x_sizes[0];")],
        "cpu",
    ),
    Wrong(
        "checks bias's length but not that it has one dimension: [C, 1] gets through",
        [(_CHECK, "  if (bias_sizes[0] != c)\n")],
        "cpu",
    ),
    Wrong(
        "accepts a bias that broadcasts: one value of 1 passes for any C",
        [(_CHECK, "  if (bias_dim != 1 || (bias_sizes[0] != c && bias_sizes[0] != 1))\n")],
        "cpu",
    ),
    Wrong(
        "compares only bias's last dimension with C: [1, C] (and [k, C]) get through",
        [(_CHECK, "  if (bias_dim == 0 || bias_sizes[bias_dim - 1] != c)\n")],
        "cpu",
    ),
    Wrong(
        "a message that does not say what was expected or what it got",
        [
            (
                """problem = "bias must have shape [C] = [" + std::to_string(c) + "] to match x's last dimension, got " +""",
                'problem = std::string("bias has the wrong shape") + "" +',
            ),
            ("              sizes_str(bias_sizes, bias_dim);", '              "";'),
        ],
        "cpu",
    ),
    Wrong(
        "a message with the expected shape but not the one it got",
        [("              sizes_str(bias_sizes, bias_dim);", '              "something else";')],
        "cpu",
    ),
]
