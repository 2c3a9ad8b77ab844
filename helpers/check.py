"""Is it right? Closeness with dtype-aware tolerances, NaN-poisoned outputs, gradcheck in float64.

with check.poisoned():                 # every torch.empty inside is filled with NaN ...
    y = ext.forward(x, coeffs)         # ... so an element the kernel forgot to write stays NaN
check.assert_close(y, reference(x))    # AssertionError naming the first bad index and both values
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


def assert_close(actual, expected, *, name: str = "output", rtol: float | None = None, atol: float | None = None):
    """torch.testing.assert_close with course tolerances and a message that shows where it first fails."""
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{name} should be a tensor, got {type(actual).__name__}")
    if actual.shape != expected.shape:
        raise AssertionError(f"{name} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{name} has dtype {actual.dtype}, expected {expected.dtype}")
    if actual.device != expected.device:
        raise AssertionError(f"{name} is on {actual.device}, expected {expected.device}")
    tol = tolerances(expected.dtype)
    tol.update({k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None})
    try:
        torch.testing.assert_close(actual, expected, **tol)
    except AssertionError:
        raise AssertionError(mismatch_report(actual, expected, name=name, **tol)) from None


def mismatch_report(actual, expected, *, name, rtol, atol) -> str:
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    bad = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    count = int(bad.sum())
    first = tuple(int(i) for i in bad.nonzero()[0]) if count else ()
    idx = ", ".join(map(str, first))
    av, ev = a[first].item(), e[first].item()
    lines = [
        f"{name}: {count} of {a.numel()} elements differ (dtype {actual.dtype}, rtol={rtol:g}, atol={atol:g}).",
        f"  first at [{idx}]: got {av!r}, expected {ev!r}",
    ]
    finite = bad & torch.isfinite(a) & torch.isfinite(e)
    if finite.any():
        lines.append(f"  largest difference: {float((a - e).abs()[finite].max()):.3g}")
    nans = int(torch.isnan(a).sum()) - int(torch.isnan(e).sum())
    if nans > 0:
        lines.append(
            f"  {nans} element(s) are NaN: outputs are poisoned with NaN before the kernel runs, "
            "so these were probably never written (grid too small? missing tail? early return?)."
        )
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
