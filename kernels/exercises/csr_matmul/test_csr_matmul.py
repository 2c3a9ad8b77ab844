"""Tests of course::csr_matmul (lesson 09's practice set: the answer's own tests). From the course folder:

python -m pytest kernels/exercises/csr_matmul/test_csr_matmul.py
"""

from pathlib import Path

import pytest
import torch

from helpers import capstone

HERE = Path(__file__).resolve().parent
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
KERNELS = {"cpu": ["auto"], "cuda": ["auto", "warp_per_row", "balanced"]}
CASES = [(device, kernel) for device in DEVICES for kernel in KERNELS[device]]


@pytest.fixture(scope="module", autouse=True)
def side():
    return capstone.load(HERE, name="csr_matmul")


def op(*args):
    return torch.ops.course.csr_matmul(*args)


def random_csr(lengths, k, dtype=torch.float32, device="cpu", seed=0):
    """(crow, col, values) with the given row lengths, columns sorted within rows, values N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    crow = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    rows = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    col = (rows * k + torch.randint(0, max(k, 1), rows.shape, generator=g)).sort().values % max(k, 1)
    values = torch.randn(rows.shape, generator=g, dtype=torch.float64).to(dtype)
    return crow.to(device), col.to(device), values.to(device)


def dense_of(crow, col, values, k):
    """A as a dense float64 matrix (repeated columns add up)."""
    m = crow.numel() - 1
    a = torch.zeros(m, k, dtype=torch.float64)
    rows = torch.repeat_interleave(torch.arange(m), crow.cpu().diff())
    return a.index_put_((rows, col.cpu()), values.double().cpu(), accumulate=True)


def tolerance(dtype):
    return dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device, kernel", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "lengths, k, n",
    [
        ([2, 0, 3, 1], 5, 3),  # an empty row
        ([1], 1, 1),
        ([], 4, 3),  # no rows
        ([0, 0, 0], 6, 4),  # no nonzeros: zeros
        ([3, 4, 2], 7, 0),  # N = 0
        ([2, 5, 0, 1, 3], 9, None),  # a vector
        ([7] * 20, 30, 70),  # wide, N odd
        ([1, 2, 300, 0, 1, 4, 1], 50, 64),  # one long row
        ([1, 0, 2000, 3], 40, None),  # one long row, vector
    ],
)
def test_forward_matches_the_dense_product(device, kernel, dtype, lengths, k, n):
    crow, col, values = random_csr(lengths, k, dtype, device)
    b = torch.randn((k,) if n is None else (k, n), dtype=dtype, device=device)
    y = op(crow, col, values, b, k, kernel)
    want = dense_of(crow, col, values, k) @ b.double().cpu()
    assert y.shape == want.shape and y.dtype == dtype and y.device == b.device
    torch.testing.assert_close(y.double().cpu(), want, **tolerance(dtype))


@pytest.mark.parametrize("device, kernel", CASES)
def test_strided_dense_gives_what_a_contiguous_one_gives(device, kernel):
    crow, col, values = random_csr([3, 0, 5, 2], 12, device=device)
    for b in (torch.randn(8, 12, device=device).t(), torch.randn(12, 16, device=device)[:, ::2]):
        torch.testing.assert_close(
            op(crow, col, values, b, 12, kernel), op(crow, col, values, b.contiguous(), 12, kernel)
        )
    v = torch.randn(24, device=device)[::2]
    torch.testing.assert_close(op(crow, col, values, v, 12, kernel), op(crow, col, values, v.contiguous(), 12, kernel))


def test_a_sparse_csr_tensor_and_int32_indices_are_taken(side):
    crow, col, values = random_csr([2, 0, 3], 4)
    a = torch.sparse_csr_tensor(crow.int(), col.int(), values, (3, 4))
    b = torch.randn(4, 5)
    torch.testing.assert_close(side.csr_matmul(a, b), a.to_dense() @ b)
    torch.testing.assert_close(side.csr_matmul((crow, col, values, 4), b), a.to_dense() @ b)


@pytest.mark.parametrize("device, kernel", CASES)
def test_gradcheck_in_float64(device, kernel):
    crow, col, values = random_csr([2, 0, 3, 1, 4], 6, torch.float64, device)
    nondet = 1e-12 if device == "cuda" else 0.0  # the GPU's atomic adds come in any order
    for b in (
        torch.randn(6, 3, dtype=torch.float64, device=device),
        torch.randn(6, dtype=torch.float64, device=device),
    ):
        b.requires_grad_()
        assert torch.autograd.gradcheck(lambda b_: op(crow, col, values, b_, 6, kernel), (b,), nondet_tol=nondet)


@pytest.mark.parametrize("device, kernel", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradient_is_a_transpose_times_grad_y(device, kernel, dtype):
    crow, col, values = random_csr([1, 0, 700, 2, 5, 0, 3], 40, dtype, device)
    b = torch.randn(40, 33, dtype=dtype, device=device, requires_grad=True)
    grad_y = torch.randn(7, 33, dtype=dtype, device=device)
    op(crow, col, values, b, 40, kernel).backward(grad_y)
    want = dense_of(crow, col, values, 40).t() @ grad_y.double().cpu()
    torch.testing.assert_close(b.grad.double().cpu(), want, **tolerance(dtype))


def test_values_get_no_gradient_and_say_so():
    crow, col, values = random_csr([2, 1], 3)
    with pytest.raises(ValueError, match=r"\bvalues\b"):
        op(crow, col, values.requires_grad_(), torch.randn(3, 2, requires_grad=True), 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "crow, col, name",
    [
        ([0, 3, 2, 4], [0, 1, 2, 0], "crow_indices"),  # decreasing
        ([1, 2, 3, 4], [0, 1, 2, 0], "crow_indices"),  # not starting at 0
        ([0, 2, 3, 3], [0, 1, 2, 0], "crow_indices"),  # not ending at nnz
        ([0, 2, 3, 4], [0, 1, 5, 0], "col_indices"),  # a column past K = 4
        ([0, 2, 3, 4], [0, -1, 2, 0], "col_indices"),
    ],
)
def test_bad_indices_get_an_error_naming_them(device, crow, col, name):
    crow, col = torch.tensor(crow, device=device), torch.tensor(col, device=device)
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        op(crow, col, torch.randn(4, device=device), torch.randn(4, 2, device=device), 4)


@pytest.mark.parametrize(
    "args, error, name",
    [
        (lambda c, j, v, b: (c.int(), j, v, b, 4), TypeError, "crow_indices"),
        (lambda c, j, v, b: (c, j, v[:3], b, 4), ValueError, "values"),
        (lambda c, j, v, b: (c, j, v.half(), b.half(), 4), TypeError, "values"),
        (lambda c, j, v, b: (c, j, v, b.double(), 4), TypeError, "dense"),
        (lambda c, j, v, b: (c, j, v, torch.randn(5, 2), 4), ValueError, "dense"),
        (lambda c, j, v, b: (c, j, v, b, 4, "fastest"), ValueError, "variant"),
    ],
)
def test_bad_arguments_get_an_error_naming_them(args, error, name):
    crow, col, values = torch.tensor([0, 2, 3, 4]), torch.tensor([0, 1, 2, 0]), torch.randn(4)
    with pytest.raises(error, match=rf"\b{name}\b"):
        op(*args(crow, col, values, torch.randn(4, 2)))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    crow, col, values = random_csr([2, 0, 3, 1], 5, device=device)
    for b in (
        torch.randn(5, 3, device=device),
        torch.randn(5, device=device),
        torch.randn(5, 4, device=device).requires_grad_(),
    ):
        torch.library.opcheck(torch.ops.course.csr_matmul, (crow, col, values, b, 5))
    torch.library.opcheck(
        torch.ops.course.csr_matmul_backward, (crow, col, values, torch.randn(4, 3, device=device), 5)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_compiles_with_fullgraph(device):
    def f(crow, col, values, x, w):
        return op(crow, col, values, x @ w, x.shape[0]).square().sum()

    # On the CPU, the tracing that torch.compile does without generating C++ (fast); on a GPU, the full compile.
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    crow, col, values = random_csr([2, 0, 3, 1, 1], 6, device=device)
    x, w = torch.randn(6, 8, device=device), torch.randn(8, 4, device=device, requires_grad=True)
    got = compiled(crow, col, values, x, w)
    got.backward()
    grad, w.grad = w.grad.clone(), None
    want = f(crow, col, values, x, w)
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, w.grad)
