"""Self-check for lesson 05's third exercise: kernels/exercises/half_dispatch.cuh, float16 in an op's dispatch,
summed in float (`ext.forward(x)`, ext = loader.load("half_dispatch"): the mean of the squares of each row).
The exercise's two functions run on the CPU (one call per row) and, in CUDA mode, on the GPU (one warp per
row): both are checked, first whether every dtype is dispatched at all, then against float64 on every dtype
and shape, then on float16 rows where a float16 sum or float16 squares go wrong."""

from __future__ import annotations

import torch

from .. import loader, selfcheck
from . import Wrong

OP = "half_dispatch"
NAME = "half_dispatch"


def _uniform(g, lo, hi) -> float:
    return float(torch.empty(()).uniform_(lo, hi, generator=g))


def reference(x):
    """The mean of the squares of each row, computed in float64 and rounded once: to float32 (float64 for
    float64 x)."""
    out = x.double().pow(2).mean(-1)
    return out if x.dtype == torch.float64 else out.float()


def _inputs(shape, dtype, device, g):
    """Values of a random scale (0.1..10) around a random shift (up to 2 scales)."""
    scale = 10 ** _uniform(g, -1, 1)
    x = (torch.randn(shape, generator=g) + _uniform(g, -2, 2)) * scale
    return (x.to(device=device, dtype=dtype),)


def _small_integers(shape, dtype, device, g):
    """Integers -8..8: their squares and sums of a few of them are exact in float16 (and in any type)."""
    return (torch.randint(-8, 9, shape, generator=g).to(device=device, dtype=dtype),)


def _near(value, spread):
    def make(shape, dtype, device, g):
        return ((torch.randn(shape, generator=g) * spread + value).to(device=device, dtype=dtype),)

    return make


# The result is float32 math for float32, float16 and bfloat16 rows. One running float sum of 65539 squares is
# within about 7e-5 (relative) of float64 (measured: the worst of 400 such rows of bfloat16, whose squares
# round at nearly every addition); a float16 sum is off by 1e-3 or more, or is inf. atol 0: no result is
# near zero by cancellation (squares are never negative), so a tiny result must be right too.
TOLERANCES = {
    torch.float32: dict(rtol=5e-4, atol=0.0),
    torch.float64: dict(rtol=1e-10, atol=0.0),
    torch.float16: dict(rtol=5e-4, atol=0.0),
    torch.bfloat16: dict(rtol=5e-4, atol=0.0),
}

_WIDE = (torch.float32, torch.float64)
_HALVES = (torch.float16, torch.bfloat16)

SPECIAL = [
    selfcheck.Case(
        "float16 rows of values near 300: their squares (about 90000) are past float16's largest value, 65504, "
        "so squared or summed in float16 they are inf; in float they are exact",
        (3, 1000),
        torch.float16,
        _near(300.0, 10.0),
    ),
    selfcheck.Case(
        "a float16 row of 65539 values near 1: a float16 sum rounds at every addition, and past 2048 (where "
        "float16 numbers are 2 apart) 2048 + 1 rounds back to 2048; a float sum keeps 24 bits",
        (1, 65539),
        torch.float16,
        _near(1.0, 0.1),
    ),
    selfcheck.Case(
        "float16 rows of values near 1e-4: their squares (about 1e-8) are below float16's smallest number "
        "(6e-8), so a square computed in float16 is 0; in float it is not",
        (3, 1000),
        torch.float16,
        _near(1e-4, 2e-5),
    ),
]


def _check_dispatched(ext, device, name: str) -> None:
    """Each of the four dtypes must reach a case of dispatch(): the op raises TypeError "... not dispatched"
    for one that does not, which the self-check reports as a failed case rather than a crash."""
    for dtype in selfcheck.DTYPES:
        try:
            ext.forward(torch.ones(2, 3, dtype=dtype, device=device))
        except TypeError as e:
            if "not dispatched" not in str(e):
                raise
            selfcheck.fail(
                name,
                f"x of dtype {str(dtype).replace('torch.', '')} on {device}",
                str(e).splitlines()[0],
                hint="add a case to dispatch() for DType::Float16 that calls body() with Half (how a float16 "
                "element is stored) and float (what to sum it in), then returns true; see "
                "kernels/exercises/half_dispatch.cuh",
            )


@selfcheck.sanitizable
def check(device=None, ext=None, seed=None) -> int:
    """forward(x) against the mean of squares in float64, on every part: the CPU, and in CUDA mode the GPU (the
    same two functions of yours). First every dtype must be dispatched; then float32 and float64 rows of every
    shape with random values; then float16 rows whose squares overflow float16, a long float16 row whose
    float16 sum stops growing, and float16 rows whose squares underflow; then float16 and bfloat16 rows of
    every shape with random values."""
    ext = ext or loader.load(OP)
    cases = 0
    with selfcheck.exercise(NAME):
        for dev in selfcheck.parts(device):
            if dev.type == "cuda":
                where = "on the GPU (one warp per row: lane l sums elements l, l + 32, ...)"
            else:
                where = "on the CPU (one sum_squares call per row)"
            name = f"float16 dispatch and the mean of squares per row, {where}"
            _check_dispatched(ext, dev, name)
            hint = (
                "dispatch(): float16 is stored as Half and summed in float, body(Half{}, float{}); sum_squares(): "
                "start the sum at A(0), convert each element with static_cast<A>(x[j]) BEFORE squaring it, add "
                "v * v in A, and visit j = first, first + step, ... below n; see kernels/exercises/half_dispatch.cuh"
            )
            common = dict(device=dev, seed=seed, tolerances=TOLERANCES, hint=hint)
            cases += selfcheck.run(name, ext.forward, reference, _inputs, dtypes=_WIDE, **common)
            # What breaks without float, explained: before the random float16 and bfloat16 rows (which catch
            # it too, but cannot say why), one float16 row that any sum gets exactly right, then the cases.
            cases += selfcheck.run(
                f"float16 squared and summed in float, {where}",
                ext.forward,
                reference,
                _small_integers,
                dtypes=(torch.float16,),
                shapes_=[(2, 3)],
                special=SPECIAL,
                **common,
            )
            cases += selfcheck.run(name, ext.forward, reference, _inputs, dtypes=_HALVES, **common)
    return cases


_CASE = "    case DType::Float16:\n      body(Half{}, float{});\n      return true;\n"
_LOOP = "    const A v = static_cast<A>(x[j]);\n    s += v * v;\n"

WRONG = [
    Wrong(
        "no float16 case in dispatch(): the op must say Half is not dispatched, not crash",
        [(_CASE, "")],
        "cpu",
    ),
    Wrong(
        "float16 dispatched, but summed in float16: body(Half{}, Half{})",
        [(_CASE, _CASE.replace("body(Half{}, float{})", "body(Half{}, Half{})"))],
        "cpu",
    ),
    Wrong(
        "float16 dispatched with bfloat16's storage type: body(BFloat16{}, float{}) reads its bits wrong",
        [(_CASE, _CASE.replace("body(Half{}, float{})", "body(BFloat16{}, float{})"))],
        "cpu",
    ),
    Wrong(
        "squares computed in T and converted to A only when added: float16 squares overflow and underflow",
        [(_LOOP, "    s += static_cast<A>(x[j] * x[j]);\n")],
        "cpu",
    ),
    Wrong(
        "summed in T (float16 for float16 rows) and converted to A only at the end",
        [
            ("  A s = A(0);\n", "  T s = T(0);\n"),
            (_LOOP, "    s += x[j] * x[j];\n"),
            ("  *sum = s;\n", "  *sum = static_cast<A>(s);\n"),
        ],
        "cpu",
    ),
    Wrong(
        "ignores `step` (j += 1): on the GPU every lane sums the row from its own first element",
        [("j += step", "j += 1")],
        "cuda",
    ),
]
