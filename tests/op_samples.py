"""One sample_inputs per finished op, and what bad input each op must refuse, for the contract tests
(tests/ops/test_ops_contract.py), in the shape of pytorch/extension-cpp's test/test_extension.py; and (lesson
04) every op registered in torch.ops.course with its samples, for tests/ops/test_library.py.

    for args in sample_inputs("layernorm", device, requires_grad=True):
        y = OPS["layernorm"].variants["v3"](ext)(*args)
    for args in library_samples("layer_norm", device, torch.bfloat16, requires_grad=True):
        torch.library.opcheck(LIBRARY_OPS["layer_norm"].overload(), args)

An op is its public entry point in helpers/ops/<name>.py (each variant: a version, what backward
saves, or the registered op called through torch.ops), its plain-PyTorch reference taking the same
arguments, its samples (some tensors differentiable, some not, as extension-cpp's make_tensor /
make_nondiff_tensor), its empty samples (numel 0), and bad calls with the exact message, in the words of
kernels/common/checks.h (`must_be_floating` and friends below are those words, written once here too).

A registered op (LibraryOp) is its name in torch.ops.course, the helpers/ops module whose register()
defines it, samples in any dtype (small, non-contiguous, 3-d, empty, mixed dtypes where the op takes
them), which arguments autograd differentiates, and for an op a learner calls: the public call and the
native PyTorch it replaces, both taking the op's own arguments.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from helpers.ops import add_norm as an
from helpers.ops import dropout as dr
from helpers.ops import fused_bias_relu as fbr
from helpers.ops import layernorm as ln
from helpers.ops import norm_dropout as ndr
from helpers.ops import polynomial as poly
from helpers.ops import rmsnorm as rms

# --------------------------------------------------------------------------------------------------
# kernels/common/checks.h's messages
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
        # ext.polynomial: the registered op course::polynomial, called from the pybind module (lessons 01-03)
        "op_via_pybind": lambda ext: lambda x, c: poly.polynomial(x, c, ext=ext),
        "torch_ops": lambda ext: lambda x, c: course_op("polynomial")(x, c),  # the op as lesson 04 calls it
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
        # the registered ops (torch.ops.course) give the same messages: the checks are in their kernels
        Bad(
            "op_x_dtype",
            lambda ext, d: course_op("polynomial")(_ones(3, device=d, dtype=torch.int32), _ones(4, device=d)),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "op_coeffs_shape",
            lambda ext, d: course_op("polynomial")(_ones(3, device=d), _ones(3, device=d)),
            ValueError,
            lambda d: must_have_shape("coeffs", [4], [3]),
        ),
        Bad(
            "op_backward_grad_y_shape",
            lambda ext, d: course_op("polynomial_backward")(
                _ones(4, device=d), _ones(3, device=d), _ones(4, device=d), True
            ),
            ValueError,
            lambda d: must_have_shape("grad_y", [3], [4]),
        ),
    ],
)

SCALE = 1.75

FUSED_BIAS_RELU = Op(
    name="fused_bias_relu",
    variants={
        **{
            f"saves_{save}": (
                lambda save: lambda ext: lambda x, b, s: fbr.fused_bias_relu(x, b, s, save=save, ext=ext)
            )(save)
            for save in fbr.SAVES
        },
        "torch_ops": lambda ext: lambda x, b, s: course_op("fused_bias_relu")(x, b, s),
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
        Bad(  # two floating dtypes promote, as in native relu(x * scale + bias); an integer bias does not
            "bias_dtype",
            lambda ext, d: fbr.fused_bias_relu(_ones(2, 3, device=d), _ones(3, device=d, dtype=torch.int32), ext=ext),
            TypeError,
            lambda d: must_have_dtype_of("bias", "x", torch.float32, torch.int32),
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
        Bad(
            "op_x_dtype",
            lambda ext, d: course_op("fused_bias_relu")(
                _ones(2, 3, device=d, dtype=torch.int32), _ones(3, device=d, dtype=torch.int32), 1.0
            ),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "op_bias_shape",
            lambda ext, d: course_op("fused_bias_relu")(_ones(2, 3, device=d), _ones(4, device=d), 1.0),
            ValueError,
            lambda d: "bias must have shape [C] = [3] to match x's last dimension, got [4]",
        ),
        Bad(  # the mask's op (what autograd calls) takes one dtype: the public op promotes before it
            "op_bits_bias_dtype",
            lambda ext, d: course_op("fused_bias_relu_bits")(
                _ones(2, 3, device=d), _ones(3, device=d, dtype=torch.float64), 1.0
            ),
            TypeError,
            lambda d: must_have_dtype_of("bias", "x", torch.float32, torch.float64),
        ),
        Bad(
            "op_in_place_bias_shape",
            lambda ext, d: course_op("fused_bias_relu_")(_ones(2, 3, device=d), _ones(4, device=d), 1.0),
            ValueError,
            lambda d: "bias must have shape [C] = [3] to match x's last dimension, got [4]",
        ),
    ],
)

EPS = 1e-5

LAYERNORM = Op(
    name="layernorm",
    variants={
        **{
            f"v{v}": (lambda v: lambda ext: lambda x, w, b, eps: ln.layer_norm(x, w, b, eps, ext=ext, version=v))(v)
            for v in (1, 2, 3)
        },
        "torch_ops": lambda ext: lambda x, w, b, eps: course_op("layer_norm")(x, [x.shape[-1]], w, b, eps),
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
        Bad(
            "op_x_dtype",
            lambda ext, d: course_op("layer_norm")(
                _ones(2, 4, device=d, dtype=torch.int32), [4], _ones(4, device=d), _ones(4, device=d), EPS
            ),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "op_weight_shape",
            lambda ext, d: course_op("layer_norm")(_ones(2, 4, device=d), [4], _ones(5, device=d), None, EPS),
            ValueError,
            lambda d: must_have_shape("weight", [4], [5]),
        ),
        Bad(
            "op_eps",
            lambda ext, d: course_op("layer_norm")(_ones(2, 4, device=d), [4], None, None, -1.0),
            ValueError,
            lambda d: "eps must be a finite number >= 0, got -1",
        ),
    ],
)

RMSNORM = Op(
    name="rmsnorm",
    variants={
        **{
            f"v{v}": (
                lambda v: lambda ext: lambda x, w, eps: rms.rms_norm(x, x.shape[-1:], w, eps, ext=ext, version=v)
            )(v)
            for v in (1, 2)
        },
        "torch_ops": lambda ext: lambda x, w, eps: course_op("rms_norm")(x, [x.shape[-1]], w, eps),
    },
    reference=lambda x, w, eps: rms.reference(x, x.shape[-1:], w, eps),
    samples=lambda t, nd: [
        [t(4, 3), t(3), EPS],
        [t(2, 3, 33), nd(33), None],
        [nd(5, 64), t(64), 1e-3],
        [t(3, 130), None, EPS],
    ],
    empty=lambda t: [[t(0, 5), t(5), EPS], [t(2, 0, 7), t(7), None]],
    bad=[
        Bad(
            "x_dtype",
            lambda ext, d: rms.rms_norm(_ones(2, 4, device=d, dtype=torch.int32), 4, _ones(4, device=d), ext=ext),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "weight_dtype",
            lambda ext, d: rms.rms_norm(_ones(2, 4, device=d), 4, _ones(4, device=d, dtype=torch.bfloat16), ext=ext),
            TypeError,
            lambda d: must_have_dtype_of("weight", "x", torch.float32, torch.bfloat16),
        ),
        Bad(
            "weight_dtype_beside_half",
            lambda ext, d: rms.rms_norm(
                _ones(2, 4, device=d, dtype=torch.bfloat16), 4, _ones(4, device=d, dtype=torch.float64), ext=ext
            ),
            TypeError,
            lambda d: "weight must have the dtype of x (BFloat16) or be float32 (Float), got Double",
        ),
        Bad(
            "weight_shape",
            lambda ext, d: rms.rms_norm(_ones(2, 4, device=d), 4, _ones(5, device=d), ext=ext),
            ValueError,
            lambda d: must_have_shape("weight", [4], [5]),
        ),
        Bad(
            "weight_device",
            lambda ext, d: rms.rms_norm(_ones(2, 4, device=d), 4, _ones(4, device=other_device(d)), ext=ext),
            RuntimeError,
            lambda d: must_be_on_device_of("weight", "x", _x_device(d), other_device(d)),
        ),
        Bad(
            "normalized_shape",
            lambda ext, d: rms.rms_norm(_ones(2, 4, device=d), (2, 5), None, ext=ext),
            ValueError,
            lambda d: "x's last dimensions must be normalized_shape [2, 5], got x of shape [2, 4]",
        ),
        Bad(
            "x_rows_of_zero",
            lambda ext, d: rms.rms_norm(_ones(3, 0, device=d), 0, None, ext=ext),
            ValueError,
            lambda d: "x's last dimension (the normalized size N) must be at least 1, got [3, 0]",
        ),
        Bad(
            "x_scalar",
            lambda ext, d: ext.forward(torch.tensor(1.0, device=d), None),
            ValueError,
            lambda d: "x must have at least one dimension, got a 0-d tensor",
        ),
        Bad(
            "eps",
            lambda ext, d: rms.rms_norm(_ones(2, 4, device=d), 4, None, -1.0, ext=ext),
            ValueError,
            lambda d: "eps must be a finite number >= 0, got -1",
        ),
        Bad(
            "version",
            lambda ext, d: ext.forward(_ones(2, 4, device=d), None, None, 3),
            ValueError,
            lambda d: version_between(2, 3),
        ),
        Bad(
            "backward_grad_y_shape",
            lambda ext, d: ext.backward(_ones(1, 4, device=d), _ones(2, 4, device=d), _ones(2, device=d), None),
            ValueError,
            lambda d: must_have_shape("grad_y", [2, 4], [1, 4]),
        ),
        Bad(
            "backward_rstd_dtype",
            lambda ext, d: ext.backward(
                _ones(2, 4, device=d), _ones(2, 4, device=d), _ones(2, device=d, dtype=torch.float64), None
            ),
            TypeError,
            lambda d: "rstd must be float32 (what forward returns for a float32 x), got float64",
        ),
        Bad(
            "op_weight_shape",
            lambda ext, d: course_op("rms_norm")(_ones(2, 4, device=d), [4], _ones(5, device=d), None),
            ValueError,
            lambda d: must_have_shape("weight", [4], [5]),
        ),
    ],
)


def _stacked(fn):
    """(y, h) as one tensor, so that the checks of an output and its gradient cover both outputs."""
    return lambda *args: torch.stack(fn(*args))


ADD_NORM = Op(
    name="add_norm",
    variants={
        "public": lambda ext: lambda x, r, w, eps: _stacked(an.add_rms_norm)(x, r, x.shape[-1:], w, eps),
        # the op takes x and residual of one shape: broadcast first, as the public call does
        "torch_ops": lambda ext: (
            lambda x, r, w, eps: _stacked(course_op("add_rms_norm"))(
                *torch.broadcast_tensors(x, r), [x.shape[-1]], w, eps
            )
        ),
    },
    reference=lambda x, r, w, eps: _stacked(an.reference_rms)(x, r, x.shape[-1:], w, eps),
    samples=lambda t, nd: [
        [t(4, 3), t(4, 3), t(3), EPS],
        [t(2, 3, 33), nd(2, 3, 33), nd(33), None],
        [nd(5, 64), t(5, 64), t(64), 1e-3],
        [t(3, 130), t(3, 130), None, EPS],
    ],
    empty=lambda t: [[t(0, 5), t(0, 5), t(5), EPS], [t(2, 0, 7), t(2, 0, 7), t(7), None]],
    bad=[
        Bad(
            "x_dtype",
            lambda ext, d: an.add_rms_norm(
                _ones(2, 4, device=d, dtype=torch.int32), _ones(2, 4, device=d, dtype=torch.int32), 4
            ),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "residual_shape",
            lambda ext, d: ext.add_rms_norm(_ones(2, 4, device=d), _ones(3, 4, device=d), [4]),
            ValueError,
            lambda d: must_have_shape("residual", [2, 4], [3, 4]),
        ),
        Bad(
            "residual_dtype",
            lambda ext, d: ext.add_rms_norm(_ones(2, 4, device=d), _ones(2, 4, device=d, dtype=torch.float64), [4]),
            TypeError,
            lambda d: must_have_dtype_of("residual", "x", torch.float32, torch.float64),
        ),
        Bad(
            "residual_device",
            lambda ext, d: ext.add_rms_norm(_ones(2, 4, device=d), _ones(2, 4, device=other_device(d)), [4]),
            RuntimeError,
            lambda d: must_be_on_device_of("residual", "x", _x_device(d), other_device(d)),
        ),
        Bad(
            "weight_shape",
            lambda ext, d: an.add_rms_norm(_ones(2, 4, device=d), _ones(2, 4, device=d), 4, _ones(5, device=d)),
            ValueError,
            lambda d: must_have_shape("weight", [4], [5]),
        ),
        Bad(
            "eps",
            lambda ext, d: an.add_rms_norm(_ones(2, 4, device=d), _ones(2, 4, device=d), 4, None, float("nan")),
            ValueError,
            lambda d: "eps must be a finite number >= 0, got nan",
        ),
        Bad(
            "layer_bias_dtype",
            lambda ext, d: an.add_layer_norm(
                _ones(2, 4, device=d, dtype=torch.bfloat16),
                _ones(2, 4, device=d, dtype=torch.bfloat16),
                4,
                _ones(4, device=d),
                _ones(4, device=d, dtype=torch.bfloat16),
            ),
            TypeError,
            lambda d: (
                "weight and bias must have the same dtype (both BFloat16 like x, or both Float), "
                "got weight Float and bias BFloat16"
            ),
        ),
        Bad(
            "layer_normalized_shape",
            lambda ext, d: an.add_layer_norm(_ones(2, 4, device=d), _ones(2, 4, device=d), (8,)),
            ValueError,
            lambda d: "x's last dimensions must be normalized_shape [8], got x of shape [2, 4]",
        ),
        Bad(
            "op_backward_grad_h_shape",
            lambda ext, d: course_op("add_rms_norm_backward")(
                _ones(2, 4, device=d),
                _ones(2, 3, device=d),
                _ones(2, 4, device=d),
                [4],
                _ones(2, device=d),
                None,
                [True, True],
            ),
            ValueError,
            lambda d: must_have_shape("grad_h", [2, 4], [2, 3]),
        ),
        Bad(
            "op_layer_backward_mean_shape",
            lambda ext, d: course_op("add_layer_norm_backward")(
                _ones(2, 4, device=d),
                None,
                _ones(2, 4, device=d),
                [4],
                _ones(3, device=d),
                _ones(2, device=d),
                None,
                None,
                [True, True, True],
            ),
            ValueError,
            lambda d: must_have_shape("mean", [2], [3]),
        ),
    ],
)


def _seeded(device, seed: int = 11) -> torch.Generator:
    """A generator seeded afresh: the op and its reference draw the same mask (it depends only on the seed
    and offset, not on the dtype), and every call of a gradcheck draws it again."""
    return torch.Generator(device=device).manual_seed(seed)


DROPOUT_P = 0.3


def _dropout_mask_of(x):
    """The mask course::dropout draws for x's shape from _seeded's state (it depends on the seed, the offset
    and the element's index only): where it keeps a tensor of ones. Philox itself is checked against
    Random123's known answers in tests/ops/test_dropout.py."""
    return course_op("dropout")(torch.ones_like(x, requires_grad=False), DROPOUT_P, True, _seeded(x.device))[0] != 0


DROPOUT = Op(
    name="dropout",
    variants={
        "public": lambda ext: lambda x: dr.dropout(x, DROPOUT_P, generator=_seeded(x.device)),
        "torch_ops": lambda ext: lambda x: course_op("dropout")(x, DROPOUT_P, True, _seeded(x.device))[0],
    },
    reference=lambda x: dr.expected(x, _dropout_mask_of(x.detach()), DROPOUT_P),
    samples=lambda t, nd: [[t(7)], [t(3, 130)], [t(5, 64)], [t(2, 3, 33)]],
    empty=lambda t: [[t(0, 5)], [t(2, 0, 7)]],
    bad=[
        Bad(
            "x_dtype",
            lambda ext, d: dr.dropout(_ones(2, 4, device=d, dtype=torch.int32), 0.5),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "p",
            lambda ext, d: dr.dropout(_ones(2, 4, device=d), 1.5),
            ValueError,
            lambda d: "p (the probability of zeroing an element) must be between 0 and 1, got 1.5",
        ),
        Bad(
            "p_nan",
            lambda ext, d: dr.dropout(_ones(2, 4, device=d), float("nan")),
            ValueError,
            lambda d: "p (the probability of zeroing an element) must be between 0 and 1, got nan",
        ),
    ],
)

NORM_DROPOUT_P = 0.3

NORM_DROPOUT = Op(
    name="norm_dropout",
    variants={
        "public": lambda ext: (
            lambda x, w, eps: ndr.rms_norm_dropout(x, x.shape[-1:], w, eps, NORM_DROPOUT_P, generator=_seeded(x.device))
        ),
        "torch_ops": lambda ext: (
            lambda x, w, eps: course_op("rms_norm_dropout")(
                x, [x.shape[-1]], w, eps, NORM_DROPOUT_P, True, _seeded(x.device)
            )[0]
        ),
    },
    # native's RMSNorm in float64, then course::dropout's mask from the same generator state
    reference=lambda x, w, eps: course_op("dropout")(
        rms.reference(x, x.shape[-1:], w, eps), NORM_DROPOUT_P, True, _seeded(x.device)
    )[0],
    samples=lambda t, nd: [
        [t(4, 3), t(3), EPS],
        [t(2, 3, 33), nd(33), None],
        [nd(5, 64), t(64), 1e-3],
        [t(3, 130), None, EPS],
    ],
    empty=lambda t: [[t(0, 5), t(5), EPS], [t(2, 0, 7), t(7), None]],
    bad=[
        Bad(
            "x_dtype",
            lambda ext, d: ndr.rms_norm_dropout(_ones(2, 4, device=d, dtype=torch.int32), 4, _ones(4, device=d)),
            TypeError,
            lambda d: must_be_floating("x", torch.int32),
        ),
        Bad(
            "p",
            lambda ext, d: ndr.rms_norm_dropout(_ones(2, 4, device=d), 4, None, None, 1.5),
            ValueError,
            lambda d: "p (the probability of zeroing an element) must be between 0 and 1, got 1.5",
        ),
        Bad(
            "weight_shape",
            lambda ext, d: ndr.rms_norm_dropout(_ones(2, 4, device=d), 4, _ones(5, device=d)),
            ValueError,
            lambda d: must_have_shape("weight", [4], [5]),
        ),
        Bad(
            "weight_device",
            lambda ext, d: ndr.rms_norm_dropout(_ones(2, 4, device=d), 4, _ones(4, device=other_device(d))),
            RuntimeError,
            lambda d: must_be_on_device_of("weight", "x", _x_device(d), other_device(d)),
        ),
        Bad(
            "version",
            lambda ext, d: ext.forward(_ones(2, 4, device=d), None, None, 0.5, True, 2),
            ValueError,
            lambda d: version_between(1, 2),
        ),
        Bad(
            "backward_rng_state_dtype",
            lambda ext, d: ext.backward(
                _ones(2, 4, device=d), _ones(2, 4, device=d), _ones(2, device=d), None, _ones(2, device=d), 0.5
            ),
            TypeError,
            lambda d: "rng_state must be int64 (the seed and offset that course::dropout returned), got Float",
        ),
        Bad(
            "backward_version",
            lambda ext, d: ext.backward(
                _ones(2, 4, device=d),
                _ones(2, 4, device=d),
                _ones(2, device=d),
                None,
                _ones(2, device=d, dtype=torch.int64),
                0.5,
                3,
            ),
            ValueError,
            lambda d: version_between(2, 3),
        ),
    ],
)

OPS = {op.name: op for op in (POLYNOMIAL, FUSED_BIAS_RELU, LAYERNORM, RMSNORM, ADD_NORM, DROPOUT, NORM_DROPOUT)}


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


# --------------------------------------------------------------------------------------------------
# The registered ops (lesson 04): torch.ops.course.*, for tests/ops/test_library.py
# --------------------------------------------------------------------------------------------------

NAMESPACE = "course"
# A sample's dtype for parameters beside x: float32 when x is float16 or bfloat16 (mixed, as native
# F.layer_norm takes them, and as autocast leaves a model's parameters), else x's own dtype.
HALF_PARAMS = "float32 beside a float16/bfloat16 x"


@dataclasses.dataclass(frozen=True)
class LibraryOp:
    """An op in torch.ops.course.

    samples(make) returns argument lists in the op's schema order. make(*size, nc=False, dtype=None) is a
    random tensor of the test's dtype (or `dtype`) on the test's device; nc=True makes it non-contiguous
    (every other element of a buffer twice as wide). A backward op's samples are built from its forward
    op's outputs, so they need that op registered. differentiable: the argument positions autograd
    differentiates (they require grad in library_samples(..., requires_grad=True), but for those the op
    writes in place: autograd refuses an in-place write to a leaf that requires grad). For an op a learner
    calls: public, the helpers.ops call, and native, the plain PyTorch it replaces, both taking the op's
    arguments (None for the ops that only autograd or a fused forward calls)."""

    name: str
    module: str  # helpers/ops/<module>.py, whose register() defines the op
    samples: Callable
    differentiable: tuple[int, ...] = ()
    public: Callable | None = None
    native: Callable | None = None
    mutated: tuple[int, ...] = ()  # the arguments the op writes in place (never a leaf that requires grad)

    @property
    def qualname(self) -> str:
        return f"{NAMESPACE}::{self.name}"

    def overload(self) -> torch._ops.OpOverload:
        """torch.ops.course.NAME.default (what opcheck takes), registering the op first."""
        return course_op(self.name).default


def course_op(name: str):
    """torch.ops.course.NAME, after helpers/ops/<module>.py's register() has built, loaded and registered it
    (with the exercises' solutions, like tests/conftest.py's load_solutions, if this is the process's first
    register(): the kernels registered are those of the build loaded last, and a stub's would fail)."""
    op = LIBRARY_OPS[name]
    module = importlib.import_module(f"helpers.ops.{op.module}")
    if not hasattr(module, "register"):
        raise AssertionError(f"helpers/ops/{op.module}.py has no register(): {op.qualname} is not registered yet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_SOLUTIONS", "1")
        module.register()
    if not hasattr(getattr(torch.ops, NAMESPACE), name):
        raise AssertionError(f"helpers.ops.{op.module}.register() did not define {op.qualname}")
    return getattr(getattr(torch.ops, NAMESPACE), name)


def _polynomial(t):
    return [
        [t(3), t(4)],
        [t(7, 129, nc=True), t(4, nc=True)],
        [t(2, 3, 5), t(4)],
        [t(0, 5), t(4)],
        [t(33), t(4, dtype=torch.float32)],  # float32 coefficients beside any x: the reference takes them
    ]


def _polynomial_backward(t):  # grad_y, x, coeffs, need_coeffs_grad
    return [[t(*x.shape, nc=not x.is_contiguous()), x, c, i % 2 == 0] for i, (x, c) in enumerate(_polynomial(t))]


def _fused_bias_relu_bits(t):  # one dtype: what the public op calls after promoting
    return [
        [t(17, 3), t(3), SCALE],
        [t(9, 20, nc=True), t(20, nc=True), -0.5],
        [t(2, 3, 5), t(5), 1.0],
        [t(0, 5), t(5), SCALE],
        [t(4, 0), t(0), SCALE],
    ]


def _fused_bias_relu(t):  # and a float32 bias beside a half x: promoted as native relu(x * scale + bias)
    return [*_fused_bias_relu_bits(t), [t(6, 16), t(16, dtype=HALF_PARAMS), SCALE]]


def _fused_bias_relu_backward_bits(t):  # grad_y, bits, scale, need_bias_grad
    out = []
    for i, (x, bias, scale) in enumerate(_fused_bias_relu_bits(t)):
        _, bits = course_op("fused_bias_relu_bits")(x, bias, scale)
        out.append([t(*x.shape, nc=not x.is_contiguous()), bits, scale, i % 2 == 0])
    return out


def _layer_norm(t):  # x, normalized_shape, weight, bias, eps
    return [
        [t(4, 3), [3], t(3), t(3), EPS],
        [t(2, 3, 33), [33], t(33, nc=True), t(33), EPS],
        [t(5, 64, nc=True), [64], t(64), None, 1e-3],  # no bias
        [t(3, 130), [130], None, None, EPS],  # neither (nn.LayerNorm(elementwise_affine=False))
        [t(0, 5), [5], t(5), t(5), EPS],
        [t(2, 0, 7), [7], t(7), t(7), EPS],
        [t(3, 40), [40], t(40, dtype=HALF_PARAMS), t(40, dtype=HALF_PARAMS), EPS],  # float32 parameters
        [t(2, 3, 4), [3, 4], t(3, 4), t(3, 4), EPS],  # over two trailing dimensions, as F.layer_norm takes
    ]


def _dropout(t):  # x, p, train: odd sizes (not whole groups of 4), p = 0 and 1 exactly, eval mode
    return [
        [t(17, 3), 0.5, True],
        [t(9, 20, nc=True), 0.25, True],
        [t(2, 3, 5), 0.9, True],
        [t(0, 5), 0.5, True],
        [t(4, 7), 0.0, True],
        [t(4, 7), 1.0, True],
        [t(5, 6), 0.5, False],
    ]


def _dropout_backward(t):  # grad_y, rng_state, p: the state a forward call drew
    out = []
    for x, p, train in _dropout(t):
        _, state = course_op("dropout")(x, p, train)
        out.append([t(*x.shape, nc=not x.is_contiguous()), state, p if train else 0.0])
    return out


def _rms_norm_dropout(t):  # x, normalized_shape, weight, eps, p, train: as _rms_norm's, and p = 1, eval mode
    return [
        [t(4, 3), [3], t(3), EPS, 0.5, True],
        [t(2, 3, 33), [33], t(33, nc=True), None, 0.25, True],
        [t(5, 64, nc=True), [64], None, 1e-3, 0.9, True],  # no weight
        [t(3, 40), [40], t(40, dtype=HALF_PARAMS), EPS, 0.5, True],  # a float32 weight
        [t(2, 0, 7), [7], t(7), None, 0.5, True],
        [t(2, 3, 4), [3, 4], t(3, 4), None, 0.1, True],  # over two trailing dimensions
        [t(4, 7), [7], t(7), EPS, 1.0, True],
        [t(5, 6), [6], t(6), EPS, 0.5, False],
    ]


def _rms_norm_dropout_backward(t):  # grad_y, x, normalized_shape, rstd, weight, rng_state, p, output_mask
    out = []
    for i, (x, shape, w, eps, p, train) in enumerate(_rms_norm_dropout(t)):
        _, rstd, state = course_op("rms_norm_dropout")(x, shape, w, eps, p, train)
        mask = [True, w is not None] if i % 2 == 0 else [True, False]
        out.append([t(*x.shape, nc=not x.is_contiguous()), x, shape, rstd, w, state, p if train else 0.0, mask])
    return out


def _layer_norm_backward(t):  # grad_y, x, normalized_shape, mean, rstd, weight, bias, output_mask
    out = []
    for i, (x, shape, w, b, eps) in enumerate(_layer_norm(t)):
        _, mean, rstd = course_op("layer_norm_forward")(x, shape, w, b, eps)
        mask = [True, w is not None, b is not None] if i % 2 == 0 else [True, False, False]
        out.append([t(*x.shape, nc=not x.is_contiguous()), x, shape, mean, rstd, w, b, mask])
    return out


def _rms_norm(t):  # x, normalized_shape, weight, eps
    return [
        [t(4, 3), [3], t(3), EPS],
        [t(2, 3, 33), [33], t(33, nc=True), None],  # eps None: native's default
        [t(5, 64, nc=True), [64], t(64), 1e-3],
        [t(3, 130), [130], None, EPS],  # no weight (nn.RMSNorm(elementwise_affine=False))
        [t(0, 5), [5], t(5), EPS],
        [t(2, 0, 7), [7], t(7), None],
        [t(3, 40), [40], t(40, dtype=HALF_PARAMS), EPS],  # a float32 weight
        [t(2, 3, 4), [3, 4], t(3, 4), None],  # over two trailing dimensions
    ]


def _rms_norm_backward(t):  # grad_y, x, normalized_shape, rstd, weight, output_mask
    out = []
    for i, (x, shape, w, eps) in enumerate(_rms_norm(t)):
        _, rstd = course_op("rms_norm_forward")(x, shape, w, eps)
        mask = [True, w is not None] if i % 2 == 0 else [True, False]
        out.append([t(*x.shape, nc=not x.is_contiguous()), x, shape, rstd, w, mask])
    return out


def _add_rms_norm(t):  # x, residual, normalized_shape, weight, eps
    return [[x, t(*x.shape, nc=i == 1), shape, w, eps] for i, (x, shape, w, eps) in enumerate(_rms_norm(t))]


def _add_rms_norm_backward(t):  # grad_y, grad_h, h, normalized_shape, rstd, weight, output_mask
    out = []
    for i, (x, r, shape, w, eps) in enumerate(_add_rms_norm(t)):
        _, h, rstd = course_op("add_rms_norm_forward")(x, r, shape, w, eps)
        mask = [True, w is not None] if i % 2 == 0 else [True, False]
        grad_h = t(*x.shape, nc=not x.is_contiguous()) if i % 3 != 2 else None  # h unused: no gradient
        out.append([t(*x.shape), grad_h, h, shape, rstd, w, mask])
    return out


def _add_layer_norm(t):  # x, residual, normalized_shape, weight, bias, eps
    return [[x, t(*x.shape, nc=i == 2), shape, w, b, eps] for i, (x, shape, w, b, eps) in enumerate(_layer_norm(t))]


def _add_layer_norm_backward(t):  # grad_y, grad_h, h, normalized_shape, mean, rstd, weight, bias, output_mask
    out = []
    for i, (x, r, shape, w, b, eps) in enumerate(_add_layer_norm(t)):
        _, h, mean, rstd = course_op("add_layer_norm_forward")(x, r, shape, w, b, eps)
        mask = [True, w is not None, b is not None] if i % 2 == 0 else [True, False, False]
        grad_h = t(*x.shape) if i % 3 != 2 else None
        out.append([t(*x.shape, nc=not x.is_contiguous()), grad_h, h, shape, mean, rstd, w, b, mask])
    return out


LIBRARY_OPS = {
    op.name: op
    for op in (
        LibraryOp("polynomial", "polynomial", _polynomial, (0, 1), poly.polynomial, poly.reference),
        LibraryOp("polynomial_backward", "polynomial", _polynomial_backward),
        LibraryOp("fused_bias_relu", "fused_bias_relu", _fused_bias_relu, (0, 1), fbr.fused_bias_relu, fbr.reference),
        LibraryOp("fused_bias_relu_bits", "fused_bias_relu", _fused_bias_relu_bits),
        LibraryOp("fused_bias_relu_backward_bits", "fused_bias_relu", _fused_bias_relu_backward_bits),
        LibraryOp(
            "fused_bias_relu_",
            "fused_bias_relu",
            _fused_bias_relu,
            (0, 1),
            lambda x, b, s: fbr.fused_bias_relu_(x, b, s),
            lambda x, b, s: x.mul_(s).add_(b).relu_(),
            mutated=(0,),
        ),
        LibraryOp(
            "layer_norm",
            "layernorm",
            _layer_norm,
            (0, 2, 3),
            lambda *args: ln.layer_norm_like_native(*args),  # F.layer_norm's arguments
            F.layer_norm,
        ),
        LibraryOp("layer_norm_forward", "layernorm", _layer_norm),
        LibraryOp("layer_norm_backward", "layernorm", _layer_norm_backward),
        LibraryOp("rms_norm", "rmsnorm", _rms_norm, (0, 2), rms.rms_norm, F.rms_norm),
        LibraryOp("rms_norm_forward", "rmsnorm", _rms_norm),
        LibraryOp("rms_norm_backward", "rmsnorm", _rms_norm_backward),
        # (y, h) stacked into one tensor: the tests' checks of an output and its gradient cover both
        LibraryOp(
            "add_rms_norm", "add_norm", _add_rms_norm, (0, 1, 3), _stacked(an.add_rms_norm), _stacked(an.reference_rms)
        ),
        LibraryOp("add_rms_norm_forward", "add_norm", _add_rms_norm),
        LibraryOp("add_rms_norm_backward", "add_norm", _add_rms_norm_backward),
        LibraryOp(
            "add_layer_norm",
            "add_norm",
            _add_layer_norm,
            (0, 1, 3, 4),
            _stacked(an.add_layer_norm),
            _stacked(an.reference_layer),
        ),
        LibraryOp("add_layer_norm_forward", "add_norm", _add_layer_norm),
        LibraryOp("add_layer_norm_backward", "add_norm", _add_layer_norm_backward),
        # Random: opcheck reseeds before each call it compares; tests/ops/test_dropout.py has the compile,
        # autocast and CUDA graph tests, which must compare masks drawn afresh (no `public` here).
        LibraryOp("dropout", "dropout", _dropout, (0,)),
        LibraryOp("dropout_backward", "dropout", _dropout_backward),
        # Random, as course::dropout: tests/ops/test_norm_dropout.py has its compile and CUDA graph tests.
        LibraryOp("rms_norm_dropout", "norm_dropout", _rms_norm_dropout, (0, 2)),
        LibraryOp("rms_norm_dropout_backward", "norm_dropout", _rms_norm_dropout_backward),
    )
}


def _spread(t: torch.Tensor) -> torch.Tensor:
    """The same values every other element of a buffer twice as wide in the last dimension: not contiguous."""
    buf = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    out = buf[..., ::2]
    out.copy_(t)
    return out


def library_samples(name: str, device, dtype=torch.float32, requires_grad: bool = False, seed: int = 0) -> list[list]:
    """The argument lists of the registered op `name` (tensors on `device`, in `dtype` unless the sample fixes
    it), from a fixed seed; with requires_grad, the differentiable arguments require grad."""
    g = torch.Generator().manual_seed(seed)
    op = LIBRARY_OPS[name]

    def make(*size, nc=False, dtype=dtype):
        if dtype == HALF_PARAMS:
            dtype = torch.float32 if make.dtype in (torch.float16, torch.bfloat16) else make.dtype
        t = torch.randn(size, generator=g).to(device=device, dtype=dtype)
        return _spread(t) if nc else t

    make.dtype = dtype
    with torch.no_grad():  # a backward op's samples call its forward op
        samples = op.samples(make)
    if requires_grad:
        for args in samples:
            for i in set(op.differentiable) - set(op.mutated):
                if isinstance(args[i], torch.Tensor):
                    args[i].requires_grad_()
    return samples
