"""Lesson 05's third exercise, float16 in an op's dispatch (kernels/half_dispatch/, kernels/exercises/
half_dispatch.cuh), built with the solution: the 16-bit types the exercise is written with (kernels/
half_dispatch_types.h: Half and BFloat16, hand-written so they work in CPU mode without CUDA) convert and
round exactly as torch's float16 and bfloat16 do, on every device present; summing in the dtype itself
(sum_in_dtype=True, what the lesson shows) breaks as the lesson says; bad arguments name the argument; a
float16 case missing from the dispatch is reported as "Half ... not dispatched", by the op and by the
self-check; and every committed wrong answer is rejected on the GPU too (tests/exercises/test_exercises.py checks the
CPU direction and the stub)."""

import re

import pytest
import torch

from helpers import exercises
from helpers.exercises import half_dispatch
from tests.conftest import load_solutions


@pytest.fixture(scope="module")
def ext():
    return load_solutions("half_dispatch")


def _all_finite_halves():
    bits = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.float16)
    return bits[bits.isfinite()]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_16_bit_value_converts_to_float_exactly(ext, device, dtype):
    """One value per row: the mean of its square is x^2 in float, exact for every 16-bit value (a square has
    at most 22 significant bits and lies within float's range), so this reads all 2^16 bit patterns."""
    bits = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)
    x = bits[bits.isfinite()].to(device)
    got = ext.forward(x[:, None])
    torch.testing.assert_close(got, x.float() ** 2, rtol=0, atol=0)
    nan = bits[bits.isnan()][:5].to(device)
    assert ext.forward(nan[:, None]).isnan().all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_summing_in_the_dtype_rounds_like_torch_16_bit_arithmetic(ext, device, dtype):
    """sum_in_dtype=True computes a * a + b * b in the 16-bit type itself (Half/BFloat16 arithmetic: float,
    rounded to nearest even); torch's float16/bfloat16 ops round the same way. Magnitudes 2^-20..2^10 give
    subnormal, normal and overflowing (inf) squares and sums."""
    g = torch.Generator().manual_seed(16)
    mag = torch.exp2(torch.empty(20000, 2).uniform_(-20, 10, generator=g))
    sign = torch.randint(0, 2, (20000, 2), generator=g) * 2 - 1
    x = (mag * sign).to(dtype).to(device)
    a, b = x[:, 0], x[:, 1]
    want = (a * a + b * b).float() / 2
    torch.testing.assert_close(ext.forward(x, True), want, rtol=0, atol=0)


def test_summing_in_float16_breaks_as_the_lesson_shows(ext):
    """The lesson's demonstration on the CPU (one running sum per row): 4096 ones summed in float16 stop at
    2048 (2048 + 1 rounds back to 2048), the square of 300 is inf, the square of 1e-4 is 0; summed in float,
    all three are right."""
    ones = torch.ones(1, 4096, dtype=torch.float16)
    assert ext.forward(ones).item() == 1.0
    assert ext.forward(ones, True).item() == 2048 / 4096
    big = torch.full((1, 1000), 300.0, dtype=torch.float16)
    assert ext.forward(big).item() == 90000.0
    assert ext.forward(big, True).item() == float("inf")
    tiny = torch.full((1, 1000), 1e-4, dtype=torch.float16)
    assert ext.forward(tiny, True).item() == 0.0
    torch.testing.assert_close(ext.forward(tiny), tiny.double().pow(2).mean(-1).float(), rtol=1e-4, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (3, 1151), (2, 5, 257), (2, 65539), (4, 0), (0, 7)])
def test_matches_torch_mean_of_squares(ext, device, dtype, shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3 + 1).to(device=device, dtype=dtype)
    got = ext.forward(x)
    want = x.double().pow(2).mean(-1).to(torch.float64 if dtype == torch.float64 else torch.float32)
    assert got.shape == shape[:-1] and got.dtype == want.dtype and got.device == x.device
    torch.testing.assert_close(got, want, rtol=1e-10 if dtype == torch.float64 else 2e-4, atol=0, equal_nan=True)


def test_non_contiguous_input(ext, device):
    x = torch.randn(64, 33, device=device).t()
    torch.testing.assert_close(ext.forward(x), x.double().pow(2).mean(-1).float(), rtol=1e-5, atol=0)


def test_bad_arguments_name_the_argument(ext):
    with pytest.raises(TypeError, match="x must be float32, float64, float16 or bfloat16"):
        ext.forward(torch.ones(3, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="x must have at least one dimension"):
        ext.forward(torch.tensor(1.0))


_NO_CASE = half_dispatch.WRONG[0]


@pytest.fixture(scope="module")
def no_float16_case():
    assert "no float16 case" in _NO_CASE.why
    return exercises.build_wrong("half_dispatch", _NO_CASE)


def test_a_missing_float16_case_is_a_clear_type_error(no_float16_case, device):
    with pytest.raises(TypeError, match=re.escape("Half (DType::Float16) not dispatched: dispatch() in kernels/")):
        no_float16_case.forward(torch.ones(2, 3, dtype=torch.float16, device=device))
    x = torch.ones(2, 3, device=device)  # the dtypes that have a case still work
    assert torch.equal(no_float16_case.forward(x), torch.ones(2, device=device))


def test_the_selfcheck_says_half_is_not_dispatched(no_float16_case, device):
    with pytest.raises(AssertionError, match=r"not yet(.|\n)*Half \(DType::Float16\) not dispatched"):
        half_dispatch.check(device=device, ext=no_float16_case)


@pytest.mark.parametrize("wrong", half_dispatch.WRONG, ids=[w.why[:40] for w in half_dispatch.WRONG])
def test_every_wrong_answer_fails_on_the_gpu_too(wrong, device):
    """The exercise's two functions are the same code on the CPU and the GPU (HALF_HD): a wrong answer for
    the CPU is wrong in the warp kernel too, and the self-check must say so there."""
    if device.type == "cpu":
        pytest.skip("tests/exercises/test_exercises.py checks the wrong answers on the CPU")
    ext = exercises.build_wrong("half_dispatch", wrong)
    with pytest.raises(AssertionError, match=re.escape("not yet")):
        half_dispatch.check(device=device, ext=ext)
