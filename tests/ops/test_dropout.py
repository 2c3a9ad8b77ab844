"""Lesson 05's dropout (kernels/common/philox.cuh, kernels/dropout/dropout.cu/.cpp, helpers/ops/dropout.py): the generator
against its specification, the mask's statistics, reproducibility, the mask recomputed in backward, the same
bits on the CPU and the GPU, p = 0 / p = 1 / eval mode, bad p, torch.compile and CUDA graphs (where each
replay must draw a new mask), and the memory that not storing the mask saves.

opcheck of both ops runs from tests/ops/test_library.py (tests/op_samples.py's LIBRARY_OPS)."""

import math
import re

import pytest
import torch

from helpers import check
from helpers.ops import dropout as dp
from tests.conftest import load_solutions, needs_gpu

FLOATING = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SIGMAS = 6  # statistical bounds at 6 standard deviations: a false alarm about once in 500 million runs
MASK64 = (1 << 64) - 1


@pytest.fixture(scope="module")
def ext():
    dp.register()
    return load_solutions("dropout")


# --------------------------------------------------------------------------------------------------
# The generator against its specification
# --------------------------------------------------------------------------------------------------

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85


def philox(counter, key):
    """Philox4x32-10 in Python integers, written from the paper (Salmon et al., SC'11), for the kernels to
    agree with."""
    c, (k0, k1) = list(counter), key
    for _ in range(10):
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [
            ((p1 >> 32) ^ c[1] ^ k0) & 0xFFFFFFFF,
            p1 & 0xFFFFFFFF,
            ((p0 >> 32) ^ c[3] ^ k1) & 0xFFFFFFFF,
            p0 & 0xFFFFFFFF,
        ]
        k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
    return c


def keep_reference(seed: int, offset: int, numel: int, p: float) -> list[bool]:
    """philox.cuh's contract: element i is kept when word i % 4 of the Philox block at counter
    (offset / 4, i / 4), key seed, is >= round(p * 2^32)."""
    threshold = round(p * 2**32)
    out = []
    for g in range((numel + 3) // 4):
        block, key = offset // 4, (seed & 0xFFFFFFFF, seed >> 32)
        words = philox([block & 0xFFFFFFFF, block >> 32, g & 0xFFFFFFFF, g >> 32], key)
        out += [w >= threshold for w in words]
    return out[:numel]


# Random123's known-answer vectors for philox4x32_10 (kat_vectors): counter, key -> output.
KNOWN_ANSWERS = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (
        [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
        [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
    ),
]


@pytest.mark.parametrize("counter, key, want", KNOWN_ANSWERS)
def test_philox_gives_random123s_known_answers(ext, counter, key, want):
    assert philox(counter, key) == want  # the Python one the tests below trust
    assert ext.philox4x32(counter, key) == want, "kernels/common/philox.cuh's philox4x32_10 on the host"


@pytest.mark.parametrize("seed, offset", [(0, 0), (123456789, 8), ((1 << 63) + 12345, (1 << 40) + 4)])
def test_keep_mask_follows_the_counter_layout(ext, seed, offset):
    """philox::keep(seed, offset, i, threshold) element by element, against the layout written in Python
    (64-bit seed and offset whose high words matter too)."""
    got = ext.keep_mask(seed - (1 << 64) if seed >= 1 << 63 else seed, offset, 103, 0.3).tolist()
    assert got == keep_reference(seed, offset, 103, 0.3)


def state_of(seed: int, offset: int, device) -> torch.Tensor:
    """An rng_state tensor (int64 [2]) for a seed and offset given as unsigned 64-bit numbers."""
    signed = [v - (1 << 64) if v >= 1 << 63 else v for v in (seed, offset)]
    return torch.tensor(signed, dtype=torch.int64, device=device)


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_the_cpu_kernel_draws_the_specified_mask_and_values(ext, dtype):
    """The op on the CPU (a size that is not whole groups of 4): where it keeps is keep_mask of the
    rng_state it returned, and the values are x / (1 - p) rounded once."""
    x = torch.randn(1001, dtype=torch.float64).to(dtype)
    y, state = torch.ops.course.dropout(x, 0.3, True)
    keep = ext.keep_mask(int(state[0]), int(state[1]), x.numel(), 0.3)
    assert torch.equal(y != 0, keep), "the mask is not philox::keep of the returned (seed, offset)"
    assert torch.equal(y, dp.expected(x, keep, 0.3))


# --------------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------------

N_STAT = 1 << 20


def mask_of(device, p, n=N_STAT, dtype=torch.float32):
    """The mask of one call: where dropout of ones kept the element."""
    return dp.dropout(torch.ones(n, device=device, dtype=dtype), p) != 0


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_is_within_a_binomial_bound(device, p):
    kept = int(mask_of(device, p).sum())
    mean, sd = N_STAT * (1 - p), math.sqrt(N_STAT * p * (1 - p))
    assert abs(kept - mean) <= SIGMAS * sd, f"kept {kept} of {N_STAT} at p={p}: expected {mean:.0f} +- {sd:.0f}"


def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


def test_neighbours_and_the_4_lanes_of_one_philox_call_are_uncorrelated(device):
    """Elements 1..8 apart are uncorrelated (|r| within 6 / sqrt(n)); within a group of 4 (the 4 words of
    one Philox call) the 16 keep patterns are equally frequent (chi-square, 15 degrees of freedom)."""
    m = mask_of(device, 0.5).cpu()
    bound = SIGMAS / math.sqrt(N_STAT)
    for lag in range(1, 9):
        r = correlation(m[:-lag], m[lag:])
        assert abs(r) < bound, f"elements {lag} apart: correlation {r:.5f} (bound {bound:.5f})"
    lanes = m.view(-1, 4).long()
    for a in range(4):
        for b in range(a + 1, 4):
            r = correlation(lanes[:, a], lanes[:, b])
            assert abs(r) < 2 * bound, f"lanes {a} and {b} of one Philox call: correlation {r:.5f}"
    counts = torch.bincount(lanes @ torch.tensor([1, 2, 4, 8]), minlength=16).double()
    expected = lanes.shape[0] / 16
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 65, f"the 16 patterns of a group of 4: chi-square {chi2:.1f} (15 dof; p < 1e-7 above 65)"


def test_different_calls_draw_independent_masks(device):
    m1, m2 = mask_of(device, 0.5).cpu(), mask_of(device, 0.5).cpu()
    r = correlation(m1, m2)
    assert abs(r) < SIGMAS / math.sqrt(N_STAT), f"two calls' masks: correlation {r:.5f}"


# --------------------------------------------------------------------------------------------------
# The generator's state: manual_seed, generator=, what is drawn
# --------------------------------------------------------------------------------------------------


def rng_state(device):
    return torch.cuda.get_rng_state(device) if torch.device(device).type == "cuda" else torch.get_rng_state()


def test_manual_seed_reproduces_the_mask_and_the_next_call_differs(device):
    x = torch.randn(4099, device=device)
    torch.manual_seed(7)
    a, b = dp.dropout(x, 0.5), dp.dropout(x, 0.5)
    torch.manual_seed(7)
    a2, b2 = dp.dropout(x, 0.5), dp.dropout(x, 0.5)
    assert torch.equal(a, a2) and torch.equal(b, b2), "torch.manual_seed did not reproduce the masks"
    assert not torch.equal(a != 0, b != 0), "the second call drew the same mask as the first"


def test_a_generator_argument_reproduces_and_leaves_the_default_generator_alone(device):
    x = torch.randn(1000, device=device)
    before = rng_state(device)
    g = torch.Generator(device=device)  # "cuda": no device index, the current GPU's
    a = dp.dropout(x, 0.5, generator=g.manual_seed(3))
    b = dp.dropout(x, 0.5, generator=g.manual_seed(3))
    c = dp.dropout(x, 0.5, generator=g.manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(rng_state(device), before), "the default generator moved"


@needs_gpu
def test_a_generator_on_another_device_is_refused():
    for g in (torch.Generator(device="cuda"), torch.Generator(device="cuda:0")):
        with pytest.raises(
            RuntimeError, match=re.escape(f"generator must be on the device of x (cpu), got {g.device}")
        ):
            dp.dropout(torch.ones(4), 0.5, generator=g)


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_p_0_and_p_1_are_exact_and_draw_nothing(device, p):
    """p = 0: y is x bit for bit, the gradient passes unchanged; p = 1: zeros (no 1 / 0, even for inf and
    NaN inputs) and a zero gradient. Neither moves the generator, as with native dropout."""
    x = torch.randn(1001, device=device)
    x[:3] = torch.tensor([float("inf"), float("nan"), -float("inf")])
    x.requires_grad_()
    g = torch.randn_like(x)
    before = rng_state(device)
    y = dp.dropout(x, p)
    (gx,) = torch.autograd.grad(y, x, g)
    assert torch.equal(rng_state(device), before), "the generator moved"
    if p == 0:
        nan = x.isnan()
        assert torch.equal(y.isnan(), nan) and torch.equal(y[~nan], x[~nan]) and torch.equal(gx, g)
    else:
        assert torch.equal(y, torch.zeros_like(y)) and torch.equal(gx, torch.zeros_like(gx))


def test_eval_mode_returns_the_input_itself(device):
    x = torch.randn(10, device=device)
    assert dp.dropout(x, 0.5, train=False) is x
    layer = dp.Dropout(0.5)
    assert not torch.equal(layer(x), x)
    assert layer.eval()(x) is x
    assert repr(layer) == "Dropout(p=0.5)"


# --------------------------------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------------------------------


def p_message(p) -> str:
    return f"p (the probability of zeroing an element) must be between 0 and 1, got {p:g}"


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")], ids=["negative", "above-1", "nan"])
def test_a_bad_p_is_a_clear_error_everywhere(ext, p):
    x = torch.ones(4)
    calls = {
        "dropout()": lambda: dp.dropout(x, p),
        "dropout(train=False)": lambda: dp.dropout(x, p, train=False),
        "Dropout()": lambda: dp.Dropout(p),
        "course::dropout": lambda: torch.ops.course.dropout(x, p, True),
        "course::dropout_backward": lambda: torch.ops.course.dropout_backward(x, torch.zeros(2, dtype=torch.long), p),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=re.escape(p_message(p))):
            call()
            pytest.fail(f"{name} accepted p={p}")


def test_other_bad_arguments_name_the_argument(ext):
    with pytest.raises(TypeError, match=re.escape("x must be float32, float64, float16 or bfloat16, got Int")):
        torch.ops.course.dropout(torch.ones(4, dtype=torch.int32), 0.5, True)
    g = torch.ones(4)
    with pytest.raises(TypeError, match=re.escape("rng_state must be int64 (the seed and offset that")):
        torch.ops.course.dropout_backward(g, torch.zeros(2), 0.5)
    with pytest.raises(ValueError, match=re.escape("rng_state must have shape [2], got [3]")):
        torch.ops.course.dropout_backward(g, torch.zeros(3, dtype=torch.long), 0.5)
    with pytest.raises(ValueError, match=re.escape("version must be between 1 and 2, got 3")):
        ext.forward(g, 0.5, True, 3)


# --------------------------------------------------------------------------------------------------
# Backward recomputes the mask
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_backward_recomputes_the_forward_mask_and_keeps_16_bytes(device, dtype):
    """grad_x = grad_y / (1 - p) exactly where forward kept (x has no zeros, so y != 0 is the mask), and all
    autograd keeps between the passes is the (seed, offset) pair, whatever the size of x."""
    x = (torch.rand(3, 1001, device=device) + 0.5).to(dtype).requires_grad_()
    x_nc = x[:, ::2]  # and a non-contiguous one
    for inp in (x, x_nc):
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            y = dp.dropout(inp, 0.3)
        assert [(t.dtype, t.numel()) for t in saved] == [(torch.int64, 2)], f"saved for backward: {saved}"
        g = torch.randn(y.shape, device=device).to(dtype)
        (gx,) = torch.autograd.grad(y, x, g)
        keep = y.detach() != 0
        check.assert_close(gx[:, :: (1 if inp is x else 2)], dp.expected(g, keep, 0.3), name="grad_x")
        assert torch.equal(y.detach(), dp.expected(inp.detach(), keep, 0.3))


def test_gradcheck_in_float64(device):
    """With the generator reseeded before each call the function is linear in x: gradcheck's numerical
    derivative then sees the mask backward recomputes."""

    def f(x):
        torch.manual_seed(11)
        return dp.dropout(x, 0.4)

    x = torch.randn(7, 9, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(f, (x,))


@needs_gpu
@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_cpu_and_cuda_give_the_same_bits_for_the_same_seed_and_offset(ext, dtype):
    """backward (the same kernel as forward) on the CPU and on the GPU from one rng_state, for 64-bit seeds
    and offsets, sizes that are not whole groups or whole 16-byte Packs, both CUDA versions and a misaligned
    pointer (v2 falls back to v1); and a CUDA forward's mask is keep_mask of the state it returned."""
    for seed, offset, n in [(1, 0, 4099), ((1 << 63) + 5, (1 << 33) + 12, 1 << 16), (99, 4, 7)]:
        g = torch.randn(n + 1, dtype=torch.float64).to(dtype)
        want = ext.backward(g[1:], state_of(seed, offset, "cpu"), 0.3)
        for version in (1, 2):
            for view in (g.cuda()[1:], g.cuda()[1:].clone()):
                got = ext.backward(view, state_of(seed, offset, "cuda"), 0.3, version)
                assert torch.equal(got.cpu(), want), f"seed {seed} offset {offset} n {n} v{version}"
    x = torch.randn(4099, device="cuda").to(dtype)
    y, state = torch.ops.course.dropout(x, 0.3, True)
    keep = ext.keep_mask(int(state[0]), int(state[1]), x.numel(), 0.3)
    assert torch.equal((y != 0).cpu(), keep)


# --------------------------------------------------------------------------------------------------
# torch.compile, autocast, CUDA graphs
# --------------------------------------------------------------------------------------------------


def test_compiled_fullgraph_draws_what_eager_draws_under_the_same_seed(device):
    """torch.compile(fullgraph=True) around dropout: no graph break; under the same torch.manual_seed the
    same output and gradient as eager; and two calls in one compiled function draw two masks (the op is
    tagged nondeterministic_seeded, so no common-subexpression pass merges them)."""
    torch._dynamo.reset()

    def fn(x):
        y = x * 1
        return dp.dropout(y, 0.5) * 2, dp.dropout(y, 0.5)  # the same call twice

    # On the CPU without inductor's code generation (tens of seconds on 2 cores), but with what merges
    # common subexpressions: AOTAutograd's min-cut partitioner, which inductor uses too.
    backend = "inductor" if torch.device(device).type == "cuda" else "aot_eager_decomp_partition"
    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    x = torch.randn(3, 1001, device=device, requires_grad=True)
    g = torch.randn_like(x)
    results = []
    for f in (fn, compiled):
        torch.manual_seed(5)
        y1, y2 = f(x)
        results.append((y1, y2, *torch.autograd.grad(y1 + y2, x, g)))
    for name, got, want in zip(("first call", "second call", "grad_x"), results[1], results[0]):
        check.assert_close(got, want, name=f"compiled {name}")
    assert not torch.equal(results[1][0] != 0, results[1][1] != 0), "the compiled calls drew one mask"


def test_autocast_leaves_the_dtype_as_native_dropout_does(device):
    x = torch.randn(64, device=device)
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        assert dp.dropout(x, 0.5).dtype == dp.reference(x, 0.5).dtype == torch.float32
        assert dp.dropout(x.bfloat16(), 0.5).dtype == torch.bfloat16


@needs_gpu
def test_cuda_graph_replays_draw_new_masks_with_matching_gradients():
    """Forward and backward captured in one graph on the default generator: every replay draws a new mask
    (PyTorch moves the generator's offset on for each replay), and its gradient uses that replay's mask,
    because the kernel wrote the (seed, offset) it read into rng_state for backward."""
    from helpers import library

    x = (torch.rand(4099, device="cuda") + 0.5).requires_grad_()
    g = torch.randn_like(x)
    out = {}

    def step():
        y = dp.dropout(x, 0.5)
        out["y"] = y.detach()
        (out["gx"],) = torch.autograd.grad(y, x, g)

    replay, _ = library.captured(step)
    masks = []
    for _ in range(3):
        replay()
        torch.cuda.synchronize()
        keep = out["y"] != 0
        masks.append(keep.clone())
        check.assert_close(out["y"], dp.expected(x.detach(), keep, 0.5), name="replayed y")
        check.assert_close(out["gx"], dp.expected(g, keep, 0.5), name="replayed grad_x")
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2]), "a replay reused a mask"


@needs_gpu
def test_not_storing_the_mask_saves_a_byte_per_element():
    """torch.cuda.max_memory_allocated around forward+backward, and memory_allocated kept between the passes,
    against native dropout (which keeps a bool mask): ours keeps 16 bytes, native numel bytes."""
    x = torch.randn(1 << 24, device="cuda", requires_grad=True)  # 64 MiB of float32, a 16 MiB mask
    g = torch.randn_like(x)
    report = {}
    for name, f in (("ours", dp.dropout), ("native", dp.reference)):
        f(x, 0.5)  # warm-up: the op loaded, the allocator's pools made
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        y = f(x, 0.5)
        kept = torch.cuda.memory_allocated() - base - y.numel() * y.element_size()
        (gx,) = torch.autograd.grad(y, x, g)
        del y, gx
        torch.cuda.synchronize()
        report[name] = (kept, torch.cuda.max_memory_allocated() - base)
    print(f"\nkept between the passes / peak above the inputs (bytes): {report}")
    assert report["ours"][0] <= 512, f"ours keeps {report['ours'][0]} bytes"  # 16, in one allocator block
    assert report["native"][0] >= x.numel(), f"native keeps {report['native'][0]} bytes"
    # the mask, less a few 512-byte allocator blocks of small tensors (H100: 16776192 of 16777216 bytes)
    assert report["native"][1] - report["ours"][1] >= x.numel() - 4096, report
