"""One sample_inputs per finished op, and what bad input each op must refuse, for the contract tests
(tests/test_ops_contract.py), in the shape of pytorch/extension-cpp's test/test_extension.py.

    for args in sample_inputs("layernorm", device, requires_grad=True):
        y = OPS["layernorm"].variants["v3"](ext)(*args)

An op is its public entry point in helpers/ops/<name>.py (each variant: a version or what backward
saves), its plain-PyTorch reference taking the same arguments, its samples (some tensors differentiable,
some not, as extension-cpp's make_tensor / make_nondiff_tensor), its empty samples (numel 0), and bad
calls with the exact message, in the words of kernels/checks.h (`must_be_floating` and friends below
are those words, written once here too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from helpers.ops import fused_bias_relu as fbr
from helpers.ops import layernorm as ln
from helpers.ops import polynomial as poly

# --------------------------------------------------------------------------------------------------
# kernels/checks.h's messages
# --------------------------------------------------------------------------------------------------

SCALAR_TYPE = {  # c10::ScalarType as a message prints it
    torch.float32: "Float",
    torch.float64: "Double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.int32: "Int",
}


def must_be_floating(name: str, got: torch.dtype) -> str:  # check_floating: TypeError
    return f"{name} must be float32, float64, float16 or bfloat16, got {SCALAR_TYPE[got]}"


def must_be_on_device_of(name: str, ref: str, ref_device, got) -> str:  # check_same_device: RuntimeError
    return f"{name} must be on the same device as {ref} ({ref_device}), got {got}"


def must_have_dtype_of(name: str, ref: str, ref_dtype: torch.dtype, got: torch.dtype) -> str:  # TypeError
    return f"{name} must have the dtype of {ref} ({SCALAR_TYPE[ref_dtype]}), got {SCALAR_TYPE[got]}"


def must_have_shape(name: str, want, got) -> str:  # check_shape: ValueError
    return f"{name} must have shape {list(want)}, got {list(got)}"


def version_between(max_version: int, got: int) -> str:  # check_version: ValueError
    return f"version must be between 1 and {max_version}, got {got}"


# --------------------------------------------------------------------------------------------------
# The ops
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Bad:
    """A call that must fail: call(ext, device) raises `exc` with `message(device)` in its text."""

    id: str
    call: Callable
    exc: type
    message: Callable[[torch.device], str]


@dataclasses.dataclass(frozen=True)
class Op:
    name: str  # kernels/<name>, helpers/ops/<name>.py
    variants: dict[str, Callable]  # variant -> (ext -> the op's callable)
    reference: Callable  # plain PyTorch, the same arguments
    samples: Callable  # (make, make_nondiff) -> list of argument lists
    empty: Callable  # (make) -> list of argument lists with numel 0
    bad: list[Bad]


def other_device(device: torch.device) -> str:
    """A device a tensor can be on that is not `device`: the CPU beside a GPU, 'meta' beside the CPU."""
    return "cpu" if device.type == "cuda" else "meta"


def _x_device(device) -> str:
    return str(torch.ones(1, device=device).device)  # cuda -> cuda:0, as messages print it


def _ones(*shape, device, dtype=torch.float32):
    return torch.ones(shape, device=device, dtype=dtype)


POLYNOMIAL = Op(
    name="polynomial",
    variants={
        "cpp_function": lambda ext: lambda x, c: poly.polynomial(x, c, ext=ext),
        "python_function": lambda ext: lambda x, c: poly.polynomial_python(x, c, ext=ext),
    },
    reference=poly.reference,
    samples=lambda t, nd: [[t(3), t(4)], [t(20), nd(4)], [nd(7, 129), t(4)], [t(2, 3, 5), t(4)]],
    empty=lambda t: [[t(0), t(4)], [t(0, 5), t(4)]],
    bad=[
        Bad(
            "x_dtype",
            lambda ext, d: poly.polynomial(_ones(3, device=d, dtype=torch.int32), _ones(4, device=d), ext=ext),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "coeffs_dtype",
            lambda ext, d: poly.polynomial(_ones(3, device=d), _ones(4, device=d, dtype=torch.int32), ext=ext),
            TypeError,
            lambda d: must_be_floating("coeffs", torch.int32),
        ),
        Bad(
            "coeffs_shape",
            lambda ext, d: poly.polynomial(_ones(3, device=d), _ones(3, device=d), ext=ext),
            ValueError,
            lambda d: must_have_shape("coeffs", [4], [3]),
        ),
        Bad(
            "coeffs_device",
            lambda ext, d: poly.polynomial(_ones(3, device=d), _ones(4, device=other_device(d)), ext=ext),
            RuntimeError,
            lambda d: must_be_on_device_of("coeffs", "x", _x_device(d), other_device(d)),
        ),
        Bad(
            "version",
            lambda ext, d: poly.polynomial(_ones(3, device=d), _ones(4, device=d), ext=ext, version=3),
            ValueError,
            lambda d: version_between(2, 3),
        ),
        Bad(
            "backward_grad_y_shape",
            lambda ext, d: ext.backward(_ones(4, device=d), _ones(3, device=d), _ones(4, device=d)),
            ValueError,
            lambda d: must_have_shape("grad_y", [3], [4]),
        ),
        Bad(
            "backward_grad_y_dtype",
            lambda ext, d: ext.backward(
                _ones(3, device=d, dtype=torch.float64), _ones(3, device=d), _ones(4, device=d)
            ),
            TypeError,
            lambda d: must_have_dtype_of("grad_y", "x", torch.float32, torch.float64),
        ),
    ],
)

SCALE = 1.75

FUSED_BIAS_RELU = Op(
    name="fused_bias_relu",
    variants={
        f"saves_{save}": (lambda save: lambda ext: lambda x, b, s: fbr.fused_bias_relu(x, b, s, save=save, ext=ext))(
            save
        )
        for save in fbr.SAVES
    },
    reference=fbr.reference,
    samples=lambda t, nd: [
        [t(3), t(3), SCALE],
        [t(17, 3), nd(3), 2.0],
        [nd(9, 20), t(20), -0.5],
        [t(2, 3, 5), t(5), 1.0],
    ],
    empty=lambda t: [[t(0, 5), t(5), SCALE], [t(4, 0), t(0), SCALE], [t(0), t(0), SCALE]],
    bad=[
        Bad(
            "x_dtype",
            lambda ext, d: fbr.fused_bias_relu(
                _ones(2, 3, device=d, dtype=torch.int32), _ones(3, device=d, dtype=torch.int32), ext=ext
            ),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "bias_dtype",
            lambda ext, d: fbr.fused_bias_relu(_ones(2, 3, device=d), _ones(3, device=d, dtype=torch.float64), ext=ext),
            TypeError,
            lambda d: must_have_dtype_of("bias", "x", torch.float32, torch.float64),
        ),
        Bad(
            "bias_shape",
            lambda ext, d: fbr.fused_bias_relu(_ones(2, 3, device=d), _ones(4, device=d), ext=ext),
            ValueError,
            lambda d: "bias must have shape [C] = [3] to match x's last dimension, got [4]",  # lesson 02's exercise
        ),
        Bad(
            "bias_device",
            lambda ext, d: fbr.fused_bias_relu(_ones(2, 3, device=d), _ones(3, device=other_device(d)), ext=ext),
            RuntimeError,
            lambda d: must_be_on_device_of("bias", "x", _x_device(d), other_device(d)),
        ),
        Bad(
            "x_scalar",
            lambda ext, d: fbr.fused_bias_relu(torch.tensor(1.0, device=d), _ones(1, device=d), ext=ext),
            ValueError,
            lambda d: "x must have at least one dimension",
        ),
        Bad(
            "save",
            lambda ext, d: fbr.fused_bias_relu(_ones(2, 3, device=d), _ones(3, device=d), save="nothing", ext=ext),
            ValueError,
            lambda d: f"save must be one of {fbr.SAVES}, got 'nothing'",
        ),
        Bad(
            "backward_grad_y_shape",
            lambda ext, d: ext.backward(_ones(3, 2, device=d), _ones(2, 3, device=d), _ones(3, device=d), 1.0),
            ValueError,
            lambda d: must_have_shape("grad_y", [2, 3], [3, 2]),
        ),
    ],
)

EPS = 1e-5

LAYERNORM = Op(
    name="layernorm",
    variants={
        f"v{v}": (lambda v: lambda ext: lambda x, w, b, eps: ln.layer_norm(x, w, b, eps, ext=ext, version=v))(v)
        for v in (1, 2, 3)
    },
    reference=ln.reference,
    samples=lambda t, nd: [
        [t(4, 3), t(3), t(3), EPS],
        [t(2, 3, 33), nd(33), t(33), EPS],
        [nd(5, 64), t(64), nd(64), 1e-3],
        [t(3, 130), t(130), t(130), EPS],
    ],
    empty=lambda t: [[t(0, 5), t(5), t(5), EPS], [t(2, 0, 7), t(7), t(7), EPS]],
    bad=[
        Bad(
            "x_dtype",
            lambda ext, d: ln.layer_norm(
                _ones(2, 4, device=d, dtype=torch.int32), _ones(4, device=d), _ones(4, device=d), ext=ext
            ),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "weight_dtype",
            lambda ext, d: ln.layer_norm(
                _ones(2, 4, device=d), _ones(4, device=d, dtype=torch.float64), _ones(4, device=d), ext=ext
            ),
            TypeError,
            lambda d: must_have_dtype_of("weight", "x", torch.float32, torch.float64),
        ),
        Bad(
            "weight_shape",
            lambda ext, d: ln.layer_norm(_ones(2, 4, device=d), _ones(5, device=d), _ones(4, device=d), ext=ext),
            ValueError,
            lambda d: must_have_shape("weight", [4], [5]),
        ),
        Bad(
            "bias_shape",
            lambda ext, d: ln.layer_norm(_ones(2, 4, device=d), _ones(4, device=d), _ones(2, 4, device=d), ext=ext),
            ValueError,
            lambda d: must_have_shape("bias", [4], [2, 4]),
        ),
        Bad(
            "weight_device",
            lambda ext, d: ln.layer_norm(
                _ones(2, 4, device=d), _ones(4, device=other_device(d)), _ones(4, device=d), ext=ext
            ),
            RuntimeError,
            lambda d: must_be_on_device_of("weight", "x", _x_device(d), other_device(d)),
        ),
        Bad(
            "x_rows_of_zero",
            lambda ext, d: ln.layer_norm(_ones(3, 0, device=d), _ones(0, device=d), _ones(0, device=d), ext=ext),
            ValueError,
            lambda d: "x's last dimension (the normalized size N) must be at least 1, got [3, 0]",
        ),
        Bad(
            "x_scalar",
            lambda ext, d: ln.layer_norm(torch.tensor(1.0, device=d), _ones(1, device=d), _ones(1, device=d), ext=ext),
            ValueError,
            lambda d: "x must have at least one dimension (the one normalized), got a scalar",
        ),
        Bad(
            "backward_grad_y_shape",
            lambda ext, d: ext.backward(
                _ones(1, 4, device=d), _ones(2, 4, device=d), _ones(2, device=d), _ones(2, device=d), _ones(4, device=d)
            ),
            ValueError,
            lambda d: must_have_shape("grad_y", [2, 4], [1, 4]),
        ),
        Bad(
            "eps",
            lambda ext, d: ln.layer_norm(_ones(2, 4, device=d), _ones(4, device=d), _ones(4, device=d), -1.0, ext=ext),
            ValueError,
            lambda d: "eps must be a finite number >= 0, got -1",
        ),
        Bad(
            "version",
            lambda ext, d: ln.layer_norm(
                _ones(2, 4, device=d), _ones(4, device=d), _ones(4, device=d), ext=ext, version=4
            ),
            ValueError,
            lambda d: version_between(3, 4),
        ),
    ],
)

OPS = {op.name: op for op in (POLYNOMIAL, FUSED_BIAS_RELU, LAYERNORM)}


def sample_inputs(op: str, device, requires_grad: bool = False, dtype=torch.float32, seed: int = 0) -> list[list]:
    """The op's argument lists (tensors on `device` in `dtype`; with requires_grad, the differentiable ones
    require grad, the others not), drawn from a fixed seed."""
    g = torch.Generator().manual_seed(seed)

    def make_tensor(*size):
        return torch.randn(size, generator=g).to(device=device, dtype=dtype).requires_grad_(requires_grad)

    def make_nondiff_tensor(*size):
        return torch.randn(size, generator=g).to(device=device, dtype=dtype)

    return OPS[op].samples(make_tensor, make_nondiff_tensor)


def empty_inputs(op: str, device, requires_grad: bool = False, dtype=torch.float32) -> list[list]:
    """The op's argument lists with numel 0 (the parameters keep their own sizes)."""
    return OPS[op].empty(lambda *size: torch.randn(size).to(device=device, dtype=dtype).requires_grad_(requires_grad))
