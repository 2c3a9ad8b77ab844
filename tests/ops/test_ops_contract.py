"""The contract every finished op keeps, one parametrized set of tests over all of them (as
pytorch/extension-cpp's test/test_extension.py): it matches its plain-PyTorch reference in value and
gradient, passes gradcheck in float64, takes empty and non-contiguous inputs, and refuses bad arguments
with a message naming the argument. The ops, their samples and their bad calls: tests/op_samples.py.
What is particular to one op (versions at awkward sizes, memory, determinism) stays in tests/test_<op>.py."""

import re

import pytest
import torch

from helpers import check
from helpers.ops import op_modules
from tests import op_samples
from tests.conftest import load_solutions

VARIANTS = [(name, variant) for name, op in op_samples.OPS.items() for variant in op.variants]
BAD = [(name, bad) for name, op in op_samples.OPS.items() for bad in op.bad]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

# Known breaches of the contract, each for its op's owner to fix (then delete the entry: these are strict;
# the outputs are poisoned with NaN, so an unwritten one fails every time).


_exts: dict = {}


def ext_of(name: str):
    if name not in _exts:
        _exts[name] = load_solutions(name)
    return _exts[name]


def op_fn(name: str, variant: str):
    return op_samples.OPS[name].variants[variant](ext_of(name))


def _wants_grad(args):
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def reference_result(name: str, args, grad_out):
    """The reference's output and the gradients of the arguments that require grad, computed in float64
    and rounded to each tensor's dtype."""
    wide = [a.detach().double().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    y = op_samples.OPS[name].reference(*wide)
    grads = torch.autograd.grad(y, _wants_grad(wide), grad_out.double()) if _wants_grad(wide) else ()
    return y, [g.to(a.dtype) for g, a in zip(grads, _wants_grad(args))]


def assert_matches_reference(name, fn, args, what=""):
    """fn(*args) and its gradients (outputs poisoned with NaN: an element never written fails) against the
    reference's in float64."""
    with check.poisoned():
        y = fn(*args)
    grad_out = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.device, y.dtype)
    want_y, want_grads = reference_result(name, args, grad_out)
    check.assert_close(y, want_y.to(y.dtype), name=f"{name} output{what}")
    if not want_grads:
        return
    with check.poisoned():
        grads = torch.autograd.grad(y, _wants_grad(args), grad_out)
    for i, (got, want) in enumerate(zip(grads, want_grads)):
        tol = dict(rtol=1e-4, atol=1e-4) if got.dtype == torch.float32 else {}  # sums of many float32 terms
        check.assert_close(got, want, name=f"{name} gradient of differentiable argument {i}{what}", **tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, variant", VARIANTS)
def test_op_matches_its_reference_in_value_and_gradient(device, name, variant, dtype):
    fn = op_fn(name, variant)
    for args in op_samples.sample_inputs(name, device, requires_grad=True, dtype=dtype):
        assert_matches_reference(name, fn, args)
    for args in op_samples.sample_inputs(name, device, requires_grad=False, dtype=dtype):
        assert_matches_reference(name, fn, args)


@pytest.mark.parametrize("name, variant", VARIANTS)
def test_op_passes_gradcheck_in_float64(device, name, variant):
    fn = op_fn(name, variant)
    for args in op_samples.sample_inputs(name, device, requires_grad=True, dtype=torch.float64):
        assert check.gradcheck(fn, *args)


@pytest.mark.parametrize("name, variant", VARIANTS)
def test_op_takes_empty_inputs(device, name, variant):
    """numel 0: an output of the reference's shape, and gradients (zeros for the parameters: a sum over
    no rows) of the arguments' shapes."""
    fn = op_fn(name, variant)
    for args in op_samples.empty_inputs(name, device, requires_grad=True):
        with check.poisoned():  # a gradient left unwritten is NaN, not whatever the memory held
            y = fn(*args)
            grads = torch.autograd.grad(y, _wants_grad(args), torch.ones_like(y))
        want_y, want_grads = reference_result(name, args, torch.ones_like(y))
        assert y.shape == want_y.shape and y.numel() == 0
        for got, want in zip(grads, want_grads):
            check.assert_close(got, want, name=f"{name} gradient on an empty input")


def spread(t):
    """The same values every other element of a buffer twice as long in the last dimension: not contiguous
    (strides that a kernel indexing as if contiguous gets wrong), still a leaf."""
    if not isinstance(t, torch.Tensor):
        return t
    buf = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    out = buf[..., ::2]
    out.copy_(t.detach())
    return out.requires_grad_(t.requires_grad)


@pytest.mark.parametrize("name, variant", VARIANTS)
def test_op_takes_non_contiguous_inputs(device, name, variant):
    fn = op_fn(name, variant)
    for args in op_samples.sample_inputs(name, device, requires_grad=True):
        args = [spread(a) for a in args]
        assert not any(isinstance(a, torch.Tensor) and a.is_contiguous() for a in args)
        assert_matches_reference(name, fn, args, " (non-contiguous inputs)")
    # column-major: another layout not to assume. Seeded: what this checks is the layout, and a float32 sum of
    # 2112 terms (polynomial's coefficient gradient) can cancel to a value whose rounding exceeds rtol 1e-4
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(64, 33, device=device, generator=g).t().requires_grad_()
    rest = op_samples.sample_inputs(name, device, requires_grad=True)[-1][1:]
    if name != "polynomial":  # the parameters are [C] for the last dimension of x
        rest = [torch.randn(64, device=device, requires_grad=True) if isinstance(a, torch.Tensor) else a for a in rest]
    assert_matches_reference(name, fn, [x, *rest], " (transposed x)")


@pytest.mark.parametrize("name, bad", BAD, ids=[f"{name}-{bad.id}" for name, bad in BAD])
def test_op_refuses_a_bad_argument_naming_it(device, name, bad):
    with pytest.raises(bad.exc, match=re.escape(bad.message(device))):
        bad.call(ext_of(name), device)


def test_every_finished_op_has_its_samples_here():
    """A new op in helpers/ops/ gets its entry in tests/op_samples.py: the contract covers every op."""
    ops = set(op_modules())
    assert ops == set(op_samples.OPS), f"ops without samples: {sorted(ops - set(op_samples.OPS))}"
