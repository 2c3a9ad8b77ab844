"""Self-check for lesson 08's first step: kernels/exercises/swiglu_derivation.py, SwiGLU's backward formulas.

On values drawn afresh each run, in float64: gate near 0 (where silu bends), very negative (flat: sigmoid
underflows) and very positive (straight), up and grad_y of either sign, zeros among grad_y; each formula against
autograd through the native composition, the derivative it must equal. Then the rules: the formulas use neither
autograd nor torch.nn.functional.silu (a formula that calls them is not one a kernel can compute), and they work
on tensors of any shape (a row of a [rows, h] tensor, a [2, 3, h] one)."""

from __future__ import annotations

import torch

from .. import capstone, selfcheck
from .. import check as _check
from . import Wrong, python_module

OP = "swiglu"  # the capstone's op (helpers/capstone.py builds it); nothing of this exercise is compiled
NAME = "swiglu_derivation"
FILE = "kernels/exercises/swiglu_derivation.py"
HINT = (
    "y = g * sigmoid(g) * u. In u it is linear: its derivative is what multiplies u. In g it is a product, g times "
    "sigmoid(g), and sigmoid'(g) = sigmoid(g) * (1 - sigmoid(g)). Multiply each by grad_y (the chain rule). "
    f"See {FILE}"
)


def _cases(g: torch.Generator):
    for label, scale, shift in (
        ("near 0", 1.0, 0.0),
        ("very negative", 5.0, -30.0),
        ("very positive", 5.0, 30.0),
        ("wide", 8.0, 0.0),
    ):
        for shape in ((5, 2 * 17), (2, 3, 2 * 9)):
            x = torch.randn(*shape, generator=g, dtype=torch.float64) * scale
            x[..., : shape[-1] // 2] += shift
            grad_y = torch.randn(*shape[:-1], shape[-1] // 2, generator=g, dtype=torch.float64)
            grad_y[..., ::4] = 0
            yield f"gate {label}, x of shape {list(shape)}", x, grad_y


class _NoShortcuts(torch.overrides.TorchFunctionMode):
    """Refuses torch.nn.functional.silu (and autograd's backward) inside the formulas."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.nn.functional.silu, torch.autograd.grad, torch.Tensor.backward):
            raise AssertionError(f"the formula calls {getattr(func, '__name__', func)}: write the derivative out")
        return func(*args, **(kwargs or {}))


def check(device=None, ext=None, seed=None) -> int:
    """Your two formulas against autograd (CPU, float64: the math, not a kernel; `device` is not used)."""
    seed = selfcheck.new_seed(seed)
    mod = ext or python_module(NAME)
    g = torch.Generator().manual_seed(seed)
    cases = 0
    with selfcheck.exercise(NAME):
        for where, x, grad_y in _cases(g):
            want_gate, want_up = capstone.reference_grad(grad_y, x).chunk(2, dim=-1)
            gate, up = x.chunk(2, dim=-1)
            for name, want in (("grad_up", want_up), ("grad_gate", want_gate)):
                try:
                    with _NoShortcuts():
                        got = getattr(mod, name)(grad_y, gate, up)
                except NotImplementedError:
                    selfcheck.fail(NAME, where, f"{name} is not written yet", hint=HINT, seed=seed)
                except AssertionError as e:
                    selfcheck.fail(NAME, where, f"{name}: {e}", hint=HINT, seed=seed)
                if not isinstance(got, torch.Tensor) or got.shape != want.shape:
                    shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                    selfcheck.fail(
                        NAME, where, f"{name} returned {shape}, expected {list(want.shape)}", hint=HINT, seed=seed
                    )
                try:
                    _check.assert_close(got, want, name=name, rtol=1e-9, atol=1e-9)
                except AssertionError as e:
                    selfcheck.fail(NAME, where, str(e), hint=HINT, seed=seed)
                cases += 1
        selfcheck.passed_now(NAME, f"both formulas match autograd on {cases // 2} cases in float64.")
    return cases


WRONG = [
    Wrong(
        "the derivative of silu taken as sigmoid alone (the product rule's second term forgotten)",
        [("return grad_y * up * s * (1 + gate * (1 - s))", "return grad_y * up * s")],
        "cpu",
    ),
    Wrong(
        "grad_y left out of grad_up",
        [("return grad_y * gate * torch.sigmoid(gate)", "return gate * torch.sigmoid(gate)")],
        "cpu",
    ),
    Wrong(
        "silu'(g) written as s * (1 - s) (the derivative of sigmoid, not of g * sigmoid(g))",
        [("return grad_y * up * s * (1 + gate * (1 - s))", "return grad_y * up * s * (1 - s)")],
        "cpu",
    ),
    Wrong(
        "grad_up through torch.nn.functional.silu: right, but not a formula a kernel computes",
        [("return grad_y * gate * torch.sigmoid(gate)", "return grad_y * torch.nn.functional.silu(gate)")],
        "cpu",
    ),
]
