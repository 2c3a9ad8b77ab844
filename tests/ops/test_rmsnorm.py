"""kernels/rmsnorm/: RMSNorm (lesson 05), every version on the CPU and (on a GPU) CUDA against a float64
reference over awkward shapes and every dtype, gradients, eps's default and mixed dtypes as native
rms_norm has them, non-contiguous and misaligned inputs, deterministic grad_weight, the module against
nn.RMSNorm, and the kernel file's header. opcheck, compile, autocast, the second derivative and CUDA graphs:
tests/ops/test_library.py (LIBRARY_OPS in tests/op_samples.py); values, gradcheck, empty and non-contiguous
inputs and bad arguments for every variant: tests/ops/test_ops_contract.py."""

import re

import pytest
import torch
import torch.nn.functional as F

from helpers import check, loader
from helpers.ops import rmsnorm as rms
from tests.conftest import load_solutions, needs_gpu

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# N = 1, 3, 127, 1151: no 16-byte packs (scalar paths); 4096: packs in registers; 65536: rows too long
# for registers (the long-row kernels; on the CPU only two rows); on a GPU 131072 and 262144: rows too long
# for one block's shared memory (sm_90: over a thread block cluster). M = 0 and 1 included.
SHAPES = [(0, 3), (1,), (3, 3), (127, 127), (5, 1151), (1, 4096), (67, 4096), (2, 65536)]
# Short rows in batches of several waves (kernels/norm_engine/launch_forward.cuh: forward_short_rows, 4 or 2 rows per row
# group; M odd, so the last group is part-empty): 40001x64, 20001x256, 16385x1024.
GPU_SHAPES = [(4096, 4096), (9, 16384), (3, 32768), (40, 65536), (2, 3, 8192), (5, 131072), (2, 262144)]
GPU_SHAPES += [(40001, 64), (20001, 256), (16385, 1024)]


@pytest.fixture(scope="module")
def ext():
    return load_solutions("rmsnorm")


def inputs(shape, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(device=device, dtype=dtype)
    w = torch.randn(shape[-1], generator=g).to(device=device, dtype=dtype)
    gy = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return x, w, gy


def expected(x, w, gy, eps=None):
    """y, grad_x and grad_weight from native F.rms_norm in float64, rounded to the inputs' dtypes."""
    xd, wd = (t.detach().double().requires_grad_() for t in (x, w))
    eps = torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps if eps is None else eps
    y = F.rms_norm(xd, (x.shape[-1],), wd, eps)
    gx, gw = torch.autograd.grad(y, (xd, wd), gy.double())
    return y.to(x.dtype), gx.to(x.dtype), gw.to(w.dtype)


def weight_tolerance(dtype, rows):
    """grad_weight adds `rows` products per column: float32 rounding grows with them."""
    return dict(rtol=1e-4, atol=1e-5 * max(rows, 10)) if dtype == torch.float32 else {}


def run_and_compare(ext, x, w, gy, version):
    with check.poisoned():
        y, rstd = ext.forward(x, w, None, version)
        gx, gw = ext.backward(gy, x, rstd, w, version)
    want_y, want_gx, want_gw = expected(x, w, gy)
    loose = dict(rtol=1e-4, atol=1e-4) if x.dtype == torch.float32 else {}  # v1 sums 65536 values in a row
    check.assert_close(y, want_y, name="y", **loose)
    check.assert_close(gx, want_gx, name="grad_x", **loose)
    check.assert_close(gw, want_gw, name="grad_weight", **weight_tolerance(x.dtype, x.numel() // x.shape[-1]))
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    assert rstd.dtype == acc and rstd.shape == x.shape[:-1]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("version", [1, 2])
def test_forward_and_backward_match_native_in_float64(ext, device, dtype, shape, version):
    run_and_compare(ext, *inputs(shape, dtype, device), version)


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_fast_path_matches_native_on_the_gpu(ext, dtype, shape):
    """Rows in registers at 8 and 16 values per thread, several short rows per row group, the long-row
    kernels, many rows per column sum."""
    run_and_compare(ext, *inputs(shape, dtype, "cuda"), 2)


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1024, 65536])
def test_misaligned_pointers_take_the_scalar_path(ext, dtype, n):
    base, w, _ = inputs((4 * n + 1,), dtype, "cuda")
    x = base[1:].view(4, n)  # contiguous, but 16-byte alignment is lost
    gy = torch.randn_like(x)
    run_and_compare(ext, x, torch.randn(n, device="cuda", dtype=dtype), gy, 2)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(4096, 1024), (300, 8192), (33, 65536), (20000, 256)], ids=str)
def test_weight_gradient_is_deterministic(ext, dtype, shape):
    """The same bits on every call, whichever kernel runs (on sm_90, 2-byte rows up to 8192 take lesson 03's
    bulk-copy kernel, a cooperative grid that adds the partial rows itself)."""
    x, w, gy = inputs(shape, dtype, "cuda")
    _, rstd = ext.forward(x, w)
    first = ext.backward(gy, x, rstd, w)
    for _ in range(3):
        again = ext.backward(gy, x, rstd, w)
        assert all(torch.equal(a, f) for a, f in zip(again, first))


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(600, 16384), (600, 32768), (150, 65536), (200, 65536)], ids=str)
def test_long_rows_over_many_rounds_of_the_ring(ext, dtype, shape):
    """Long rows on sm_90 run backward_bulk_kernel: a persistent grid of clusters, each going round its ring
    of stages and its exchange slots many times (600 rows over 30-66 clusters). Right, and the same bits on
    every call; elsewhere this checks the long-row pair the same way. The forward of bf16 rows of 65536 takes
    forward_bulk_kernel from 3 rows per cluster (on an H100 200 rows over about 66 clusters of 2: taken),
    forward_long_kernel below (150 rows)."""
    x, w, gy = inputs(shape, dtype, "cuda")
    run_and_compare(ext, x, w, gy, 2)
    _, rstd = ext.forward(x, w)
    first = ext.backward(gy, x, rstd, w)
    again = ext.backward(gy, x, rstd, w)
    assert all(torch.equal(a, f) for a, f in zip(again, first))


def test_eps_none_is_natives_default(device):
    """Native's default eps is the epsilon of the math type (float32's for a bfloat16 x), not of x's dtype:
    on rows of tiny values the two differ by far more than rounding."""
    for dtype in DTYPES:
        x = torch.full((3, 8), 1e-3, device=device, dtype=dtype) * torch.arange(1, 9, device=device, dtype=dtype)
        check.assert_close(rms.rms_norm(x, 8), F.rms_norm(x, (8,)), name=f"y, {dtype}")
        assert not torch.allclose(rms.rms_norm(x, 8).float(), F.rms_norm(x, (8,), eps=1e-2).float(), atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(6, 40), (300, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_a_float32_weight_beside_a_half_input_gives_what_native_gives(device, dtype, shape):
    """Native rms_norm takes a float32 weight beside a half x: y in x's dtype, grad_weight float32."""
    x, _, gy = inputs(shape, dtype, device)
    n = shape[-1]
    w = torch.randn(n, device=device).requires_grad_()
    x.requires_grad_()
    y = rms.rms_norm(x, (n,), w)
    gx, gw = torch.autograd.grad(y, (x, w), gy)
    assert y.dtype == dtype and gx.dtype == dtype and gw.dtype == torch.float32
    _, want_gx, want_gw = expected(x, w, gy)
    check.assert_close(y, F.rms_norm(x.double(), (n,), w.double()).to(dtype), name="y")
    check.assert_close(gx, want_gx, name="grad_x")
    check.assert_close(gw, want_gw, name="grad_weight", rtol=1e-2, atol=1e-2)  # from a rounded grad_y * xhat


def test_several_normalized_dimensions_and_gradcheck(device):
    x = torch.randn(2, 3, 4, 5, device=device, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 5, device=device, dtype=torch.float64, requires_grad=True)
    check.assert_close(rms.rms_norm(x, (4, 5), w, 1e-3), F.rms_norm(x, (4, 5), w, 1e-3), name="y")
    assert torch.autograd.gradcheck(lambda x, w: rms.rms_norm(x, (4, 5), w), (x, w))
    assert torch.autograd.gradcheck(lambda x: rms.rms_norm(x, (4, 5)), (x,))


def test_transposed_and_sliced_inputs(device):
    x = torch.randn(33, 64, device=device).t()  # column-major
    w = torch.randn(64, device=device)[None].expand(2, 64)[0]  # a view
    check.assert_close(rms.rms_norm(x, 33, w[:33]), rms.reference(x.double(), 33, w[:33].double()).float())


def test_module_takes_what_nn_rmsnorm_takes(device):
    for kwargs in ({}, {"eps": 1e-3}, {"elementwise_affine": False}):
        ours, native = rms.RMSNorm((3, 8), device=device, **kwargs), torch.nn.RMSNorm((3, 8), device=device, **kwargs)
        assert repr(ours).replace("RMSNorm", "") == repr(native).replace("RMSNorm", "")
        assert ours.state_dict().keys() == native.state_dict().keys()
        if ours.weight is not None:
            with torch.no_grad():
                ours.weight.normal_()
                native.weight.copy_(ours.weight)
        x = torch.randn(4, 3, 8, device=device)
        check.assert_close(ours(x), native(x), name=f"RMSNorm({kwargs})")


def test_kernel_file_header_maps_every_kernel():
    """rmsnorm.cu's header is a map: every kernel it or the norm engine defines is named in a header, and
    every name there exists; every launcher of rmsnorm.h is in rmsnorm.cu's header."""
    kernel = r"__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\("
    names = set()
    headers = ("rmsnorm/rmsnorm.cu", "norm_engine/engine.cuh", "norm_engine/forward.cuh", "norm_engine/backward.cuh")
    for f in (*headers, "norm_engine/rounds.cuh", "add_norm/add_norm.cu"):
        lines = (loader.KERNELS / f).read_text().splitlines()
        header = "\n".join(lines[: next(i for i, line in enumerate(lines) if not line.startswith("//"))])
        names |= set(re.findall(r"\b(\w+_kernel)\b", header))
    text = "".join(
        (loader.KERNELS / f).read_text()
        for f in ("rmsnorm/rmsnorm.cu", "norm_engine/forward.cuh", "norm_engine/backward.cuh", "norm_engine/rounds.cuh")
    )
    defined = set(re.findall(kernel, text))
    assert defined <= names, f"kernels no header maps: {sorted(defined - names)}"
    assert names <= defined, f"headers name kernels that do not exist: {sorted(names - defined)}"
    launchers = set(re.findall(r"void (rmsnorm_\w+)\(", (loader.KERNELS / "rmsnorm/rmsnorm.h").read_text()))
    head = (loader.KERNELS / "rmsnorm/rmsnorm.cu").read_text().split("#include")[0]
    assert launchers and all(name in head for name in launchers), sorted(n for n in launchers if n not in head)


def test_the_hand_written_node_keeps_autograds_rules(device):
    """course::rms_norm's backward node is written by hand (RmsNormBackward, as layer_norm's): an input changed
    in place after the forward, a second backward through a freed graph, a forward-mode tangent are errors;
    no grad needed, no node."""
    x = torch.randn(3, 16, device=device).requires_grad_()
    w = torch.randn(16, device=device).requires_grad_()
    y = rms.rms_norm(x * 1, (16,), w)
    assert y.grad_fn.name() == "RmsNormBackward (course::rms_norm)"
    assert rms.rms_norm(x * 1, (16,), None).grad_fn.next_functions[1][0] is None  # weight None: no edge
    y.sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.sum().backward()
    h = x * 1
    y = rms.rms_norm(h, (16,), w)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level(), pytest.raises(RuntimeError, match="course::rms_norm has no forward-mode derivative"):
        rms.rms_norm(fwAD.make_dual(x.detach(), torch.ones_like(x)), (16,), w)
    with torch.no_grad():
        assert rms.rms_norm(x, (16,), w).grad_fn is None
