"""Is it right? Closeness with dtype-aware tolerances, NaN-poisoned outputs, gradcheck in float64.

with check.poisoned():                 # every torch.empty inside is filled with NaN ...
    y = ext.forward(x, coeffs)         # ... so an element the kernel forgot to write stays NaN
check.assert_close(y, reference(x))    # torch.testing.assert_close, with the name, the first bad index
                                       # and both values, and a hint when NaN shows an unwritten element
"""

from __future__ import annotations

import contextlib

import torch

# Default tolerances by dtype, for a kernel that computes in float32 compared with a reference computed
# in float64 and rounded to the same dtype: a few units in the last place of the dtype.
TOLERANCES = {
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
}


def tolerances(dtype: torch.dtype) -> dict:
    return dict(TOLERANCES.get(dtype, dict(rtol=0.0, atol=0.0)))


def assert_close(
    actual, expected, *, name: str = "output", rtol: float | None = None, atol: float | None = None, **kwargs
):
    """torch.testing.assert_close with the course's tolerances (`tolerances(expected.dtype)`, or rtol and
    atol given) and a message that starts with `name`; when values differ it adds how many, the first one
    (index, got, expected) and, for NaN where a number was expected, that the element was probably never
    written (outputs are poisoned with NaN). Other keywords (equal_nan=..., check_stride=...) go to torch."""
    if not isinstance(actual, torch.Tensor):  # torch raises TypeError for some of these: a self-check wants
        raise AssertionError(f"{name} should be a tensor, got {type(actual).__name__}")  # AssertionError
    tol = tolerances(expected.dtype) if isinstance(expected, torch.Tensor) else {}
    tol.update({k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None})

    def msg(generated: str) -> str:
        return _report(generated, actual, expected, name=name, equal_nan=kwargs.get("equal_nan", False), **tol)

    torch.testing.assert_close(actual, expected, msg=msg, **tol, **kwargs)


def _report(generated: str, actual, expected, *, name, rtol=0.0, atol=0.0, equal_nan=False) -> str:
    """`name: ` + torch's message; for values that differ, our summary first (count, first mismatch, the
    NaN hint), then torch's (greatest absolute and relative difference)."""

    def meta(t):
        return t.shape, t.dtype, t.device

    if not isinstance(expected, torch.Tensor) or meta(actual) != meta(expected):
        return f"{name}: {generated}"
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    bad = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    count = int(bad.sum())
    lines = [f"{name}: {count} of {a.numel()} elements differ (dtype {actual.dtype}, rtol={rtol:g}, atol={atol:g})."]
    if count:
        first = tuple(int(i) for i in bad.nonzero()[0])
        lines.append(
            f"  first at [{', '.join(map(str, first))}]: got {a[first].item()!r}, expected {e[first].item()!r}"
        )
    unwritten = int((torch.isnan(a) & ~torch.isnan(e)).sum())
    if unwritten:
        lines.append(
            f"  {unwritten} element(s) are NaN: outputs are poisoned with NaN before the kernel runs, "
            "so these were probably never written (grid too small? missing tail? early return?)."
        )
    torch_says = [line for line in generated.splitlines() if line.strip()]
    lines += [f"  torch.testing.assert_close: {t}" for t in torch_says[:1]] + [f"    {t}" for t in torch_says[1:]]
    return "\n".join(lines)


@contextlib.contextmanager
def poisoned():
    """Inside this block torch.empty and friends (also those called from C++) return NaN-filled memory.

    Uses torch's deterministic mode (torch.utils.deterministic.fill_uninitialized_memory), with
    warn_only so that ops without a deterministic implementation still run.
    """
    import torch.utils.deterministic as det

    was_on, was_warn = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    was_fill = det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        yield
    finally:
        det.fill_uninitialized_memory = was_fill
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn)


def gradcheck(fn, *inputs, **kwargs) -> bool:
    """torch.autograd.gradcheck on float64 copies of the floating-point inputs (leaves that require grad).

    Tensors that required grad keep requiring it; others are passed through unchanged. Raises with
    torch's message (which names the input and shows the numerical and analytical Jacobians) on failure.
    """
    prepared = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            prepared.append(t.detach().to(torch.float64).requires_grad_(t.requires_grad))
        else:
            prepared.append(t)
    if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in prepared):
        raise ValueError("gradcheck needs at least one input with requires_grad=True")
    kwargs.setdefault("eps", 1e-6)
    kwargs.setdefault("atol", 1e-5)
    kwargs.setdefault("rtol", 1e-4)
    return torch.autograd.gradcheck(fn, tuple(prepared), **kwargs)
