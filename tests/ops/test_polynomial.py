"""kernels/polynomial/: CPU and (on a GPU) CUDA paths against plain PyTorch, gradients, bad input."""

import re

import pytest
import torch

from helpers import check, env
from helpers.ops import polynomial as poly
from tests.conftest import load_solutions, needs_gpu

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SHAPES = [(1,), (3,), (1151,), (4097,), (7, 129), (2, 3, 5), (65536 + 3,)]
COEFFS = [1.5, 0.5, -2.0, 0.25]


@pytest.fixture(scope="module")
def ext():
    return load_solutions("polynomial")


def expected(x, coeffs):
    return poly.reference(x.double(), coeffs.double()).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("version", [1, 2])
def test_forward_matches_reference(ext, device, dtype, shape, version):
    x = torch.randn(shape, device=device).to(dtype)
    c = torch.tensor(COEFFS, device=device)
    with check.poisoned():
        y = ext.forward(x, c, version)
    check.assert_close(y, expected(x, c))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_backward_matches_autograd(ext, device, dtype, shape):
    x = torch.randn(shape, device=device).to(dtype)
    g = torch.randn(shape, device=device).to(dtype)
    c = torch.tensor(COEFFS, device=device, dtype=torch.float64)
    xd = x.double().requires_grad_()
    cd = c.clone().requires_grad_()
    poly.reference(xd, cd).backward(g.double())
    with check.poisoned():
        gx, gc = ext.backward(g, x, c, True, 2)
        gx1 = ext.backward(g, x, c, False, 1)[0]
    check.assert_close(gx, xd.grad.to(dtype), name="grad_x")
    check.assert_close(gx1, xd.grad.to(dtype), name="grad_x (v1)")
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    tol = dict(rtol=1e-5, atol=1e-5 * x.numel()) if acc == torch.float32 else {}
    check.assert_close(gc, cd.grad.to(acc), name="grad_coeffs", **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("version", [1, 2])
def test_forward_out_writes_the_view_and_nothing_around_it(ext, device, dtype, version):
    x = torch.randn(1151, device=device).to(dtype)
    c = torch.tensor(COEFFS, device=device)
    buf = torch.full((1151 + 2048,), 7.0, device=device, dtype=dtype)
    out = ext.forward_out(x, c, buf[1024 : 1024 + 1151], version)
    assert out.data_ptr() == buf[1024:].data_ptr()
    check.assert_close(out, expected(x, c))
    assert bool((buf[:1024] == 7).all()) and bool((buf[1024 + 1151 :] == 7).all())


def test_forward_out_rejects_a_bad_out(ext, device):
    x, c = torch.ones(6, device=device), torch.ones(4, device=device)
    with pytest.raises(ValueError, match="out must have shape"):
        ext.forward_out(x, c, torch.empty(5, device=device))
    with pytest.raises(TypeError, match="out must have the dtype of x"):
        ext.forward_out(x, c, torch.empty(6, device=device, dtype=torch.float64))
    with pytest.raises(ValueError, match="out must be contiguous"):
        ext.forward_out(x.view(2, 3), c, torch.empty(3, 2, device=device).t())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_version_1_of_half_types_goes_through_float_with_the_same_bits(ext, dtype):
    """Version 1's CPU loops are written for float and double; the glue converts half and bfloat16 to float
    around them, which gives the bits of the given version 2 (which computes in float from the half values)."""
    x = torch.randn(4097).to(dtype)
    g = torch.randn(4097).to(dtype)
    c = torch.tensor(COEFFS)
    assert torch.equal(ext.forward(x, c, 1), ext.forward(x, c, 2))
    assert torch.equal(ext.backward(g, x, c, False, 1)[0], ext.backward(g, x, c, False, 2)[0])


@pytest.mark.parametrize("op", [poly.polynomial, poly.polynomial_python], ids=["cpp_autograd", "python_autograd"])
def test_autograd_through_a_loss_with_broadcast_grad(device, op):
    x = torch.randn(4, 33, device=device, requires_grad=True)
    c = torch.tensor(COEFFS, device=device, requires_grad=True)
    op(x, c).sum().backward()  # grad_y is an expanded (stride 0) tensor
    xr, cr = x.detach().clone().requires_grad_(), c.detach().clone().requires_grad_()
    poly.reference(xr, cr).sum().backward()
    check.assert_close(x.grad, xr.grad)
    check.assert_close(c.grad, cr.grad, rtol=1e-4, atol=1e-4)


def test_empty_input_gives_empty_result(ext, device):
    x = torch.empty(0, 5, device=device)
    c = torch.tensor(COEFFS, device=device)
    assert ext.forward(x, c).shape == (0, 5)
    gx, gc = ext.backward(x, x, c, True, 2)
    assert gx.shape == (0, 5)


@pytest.mark.parametrize(
    "make, exc, words",
    [
        (
            lambda d: (torch.ones(3, dtype=torch.int32, device=d), torch.ones(4, device=d)),
            TypeError,
            "x must be float32",
        ),
        (lambda d: (torch.ones(3, device=d), torch.ones(3, device=d)), ValueError, "coeffs must have shape [4]"),
        (
            lambda d: (torch.ones(3, device=d), torch.ones(4, device="meta")),
            RuntimeError,
            "coeffs must be on the same device as x",
        ),
        (lambda d: (None, torch.ones(4, device=d)), (ValueError, TypeError), "x"),
    ],
)
def test_bad_input_names_the_argument(ext, device, make, exc, words):
    x, c = make(device)
    with pytest.raises(exc, match=words.replace("[", r"\[").replace("]", r"\]")):
        ext.forward(x, c)


def test_bad_backward_input_names_the_argument(ext, device):
    x, c = torch.ones(3, device=device), torch.ones(4, device=device)
    with pytest.raises(ValueError, match="grad_y must have shape"):
        ext.backward(torch.ones(4, device=device), x, c)
    with pytest.raises(TypeError, match="grad_y must have the dtype of x"):
        ext.backward(torch.ones(3, device=device, dtype=torch.float64), x, c)
    with pytest.raises(ValueError, match="version must be between 1 and 2"):
        ext.forward(x, c, 3)
    with pytest.raises(ValueError, match="need_coeffs_grad=False"):
        ext.backward(x, x, c, True, 1)


@needs_gpu
def test_cpu_tensor_to_cuda_op_is_a_clear_error(ext):
    with pytest.raises(RuntimeError, match=r"coeffs must be on the same device as x \(cuda:0\), got cpu"):
        ext.forward(torch.ones(3, device="cuda"), torch.ones(4))


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_pointer_takes_the_scalar_path(ext, dtype):
    base = torch.randn(4097, device="cuda").to(dtype)
    x = base[1:]  # contiguous, but 16-byte alignment is lost
    c = torch.tensor(COEFFS, device="cuda")
    check.assert_close(ext.forward(x, c), expected(x, c))
    gx, _ = ext.backward(x, x, c, True, 2)
    check.assert_close(gx, ext.backward(x.clone(), x.clone(), c, True, 2)[0])


@needs_gpu
def test_coefficient_gradient_is_deterministic(ext):
    x = torch.randn(1 << 22, device="cuda")
    c = torch.tensor(COEFFS, device="cuda")
    first = ext.backward(x, x, c, True, 2)[1]
    for _ in range(3):
        assert torch.equal(ext.backward(x, x, c, True, 2)[1], first)


@needs_gpu
def test_matches_cpu_implementation(ext):
    x = torch.randn(100_003)
    c = torch.tensor(COEFFS)
    check.assert_close(ext.forward(x.cuda(), c.cuda()).cpu(), ext.forward(x, c))


def test_coeffs_only_gradient(device):
    x = torch.randn(100, device=device)
    c = torch.tensor(COEFFS, device=device, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(poly.polynomial(x, c).sum(), c)
    assert grad.dtype == torch.float64
    xd = x.double()
    check.assert_close(
        grad, torch.stack([(xd**3).sum(), (xd**2).sum(), xd.sum(), xd.new_tensor(100.0)]), rtol=1e-5, atol=1e-4
    )


def test_kernel_file_header_names_every_launcher():
    """kernels/polynomial/polynomial.cu opens with an index (version -> kernel / launcher): every launcher declared in
    polynomial.h, and every kernel it names, must exist."""
    header = (env.KERNELS / "polynomial/polynomial.h").read_text()
    index = (env.KERNELS / "polynomial/polynomial.cu").read_text().split("#include")[0]
    sources = "".join(
        (env.KERNELS / f).read_text() for f in ("polynomial/polynomial.cu", "polynomial/polynomial.exercises.cu")
    )
    sources += (env.KERNELS / "solutions" / "polynomial_forward.cuh").read_text()
    launchers = set(re.findall(r"\b(poly_\w+)\(", header)) - {"poly_backward_v2_blocks"}
    assert launchers and all(name in index for name in launchers), sorted(launchers)
    for kernel in re.findall(r"\b(\w+_kernel)\b", index):
        assert re.search(rf"__global__ void {kernel}\(", sources), f"the index names {kernel}, which does not exist"
