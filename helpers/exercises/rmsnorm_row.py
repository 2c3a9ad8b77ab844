"""Self-check for lesson 05's first exercise: kernels/exercises/rmsnorm_row.cuh, RMSNorm backward of one row
(`ext.backward(grad_y, x, rstd, weight, grad_x)`, ext = loader.load("rmsnorm_row")). Part 1 (the CPU loop) is
checked on the CPU, Part 2 (rmsnorm_backward_row_kernel, one warp per row) on a GPU.

The reference is independent of the formula the learner writes: torch autograd through F.rms_norm in float64.
What a wrong answer cannot get past, beyond selfcheck.run's NaN-poisoned outputs and fresh draws:
* grad_x is written into a view inside a larger buffer whose guard before and after must come back untouched,
  and the inputs sit in padded buffers, so a kernel without a tail guard (or a loop one past the row) writes
  into the guard instead of unowned memory;
* about a tenth of grad_y is zero in every case, and whole rows of zeros in one, so skipping an element whose
  incoming gradient is zero leaves a NaN;
* deterministic float16/bfloat16 rows where grad_x is what is left after two nearly equal terms cancel: a sum
  kept in (or once rounded to) the 16-bit type misses by 6x the tolerance or more, on every run, on every seed;
* a [M, 4097] bfloat16 case past 2^32 elements (2^31 where the GPU has less memory) for 32-bit row offsets.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import check as _check
from .. import env, loader, selfcheck
from . import Wrong

OP = "rmsnorm_row"
NAME = "rmsnorm_row"
SENTINEL = 1234.0  # the guard's value around grad_x: finite, exact in float16 and bfloat16 rounds it once
LARGE_N = 4097  # the large case's row length: rows start at offsets that are not multiples of 32 or 16 bytes


def _uniform(g, lo, hi) -> float:
    return float(torch.empty(()).uniform_(lo, hi, generator=g))


def _rstd(x, eps):
    """What the forward saves: 1 / sqrt(mean(x^2) + eps) per row, in float64, rounded to float32 (kept in
    float64 for float64 x)."""
    r = torch.rsqrt(x.double().pow(2).mean(-1) + eps)
    return r.to(torch.float64 if x.dtype == torch.float64 else torch.float32)


def reference(grad_y, x, weight, rstd, eps):
    """grad_x by torch autograd through F.rms_norm in float64 (it does not use `rstd`), rounded to x's dtype."""
    xd = x.detach().double().requires_grad_()
    y = F.rms_norm(xd, (x.shape[-1],), None if weight is None else weight.double(), eps)
    return torch.autograd.grad(y, xd, grad_y.double())[0].to(x.dtype)


def _inputs(shape, dtype, device, g):
    """Everything drawn per case: the rows' scale (0.1..10) and shift, eps (1e-5..1e-1), the weight (None in a
    quarter of the cases), grad_y with about a tenth of its values zero; rstd is what the forward saves."""
    n = shape[-1]
    scale = 10 ** _uniform(g, -1, 1)
    x = ((torch.randn(shape, generator=g) + _uniform(g, -2, 2)) * scale).to(dtype)
    eps = 10 ** _uniform(g, -5, -1)
    weight = torch.randn(n, generator=g).to(dtype) if _uniform(g, 0, 1) > 0.25 else None
    grad_y = torch.randn(shape, generator=g) * (torch.rand(shape, generator=g) > 0.1)
    grad_y, x = grad_y.to(dtype).to(device), x.to(device)
    return grad_y, x, None if weight is None else weight.to(device), _rstd(x, eps), eps


def _zero_grad_inputs(shape, dtype, device, g):
    """Row 0 of grad_y all zeros (its grad_x is 0), row 1 zero at every other element, row 2 zero but for one
    element: wherever grad_y is zero but the row's mean(g * xhat) is not, grad_x is not zero."""
    grad_y, x, weight, _, _ = _inputs(shape, dtype, "cpu", g)
    weight = torch.randn(shape[-1], generator=g).to(dtype)
    grad_y = torch.randn(shape, generator=g).to(dtype)
    grad_y[0] = 0
    grad_y[1, ::2] = 0
    grad_y[2, 1:] = 0
    return grad_y.to(device), x.to(device), weight.to(device), _rstd(x, 1e-5).to(device), 1e-5


def _no_weight_inputs(shape, dtype, device, g):
    grad_y, x, _, rstd, eps = _inputs(shape, dtype, device, g)
    return grad_y, x, None, rstd, eps


def cancelling_inputs(shape, dtype, device, g=None):
    """Deterministic rows (no random draw: the same on every run) where g = grad_y * weight is nearly
    proportional to xhat = x * rstd, so grad_x = rstd * (g - xhat * mean(g * xhat)) is what is left of two nearly
    equal terms: about 1e-5 of them. Every product g * x has the same size (|x| = 1.3, |weight| = 0.7, signs
    mixed), so a sum rounded to float16 or bfloat16 at every step drifts the same way at every step, and even
    one rounding of the sum or of the mean moves grad_x by 6x the tolerance or more."""
    n = shape[-1]
    j = torch.arange(n)
    x = (1.3 * torch.where(j % 3 == 0, -1.0, 1.0)).expand(shape).to(dtype)
    weight = (0.7 * torch.where(j % 5 == 0, -1.0, 1.0)).to(dtype)
    eps = 1e-6
    rstd = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps)
    grad_y = (60.7 * x.double() * rstd / weight.double()).to(dtype)
    return grad_y.to(device), x.contiguous().to(device), weight.to(device), _rstd(x, eps).to(device), eps


def _shapes(seed: int) -> list[tuple[int, ...]]:
    """Awkward row lengths (1, 3, 31, 33, 257, 1025, 1151, 4097, 65539: not multiples of 32), row counts that
    leave the last block of 8 warps partly empty, and the random shapes selfcheck draws from the seed."""
    fixed = [(1, 1), (3, 3), (2, 31), (5, 33), (7, 257), (3, 1025), (9, 1151), (2, 4097), (1, 65539), (2, 3, 5)]
    return fixed + selfcheck.shapes(seed)[-4:]


# float32: grad_x of a row of one value (or of rows like the cancelling ones) is what is left after g and
# xhat * mean(g * xhat) cancel, and rstd (up to 1 / sqrt(eps) = 316) multiplies the rounding error that the
# float32 rstd the forward saves brings in: up to ~5e-4 where the float64 reference has the exact rstd. Wrong
# answers miss by O(0.01-1).
TOLERANCES = {torch.float32: dict(rtol=1e-5, atol=1e-3)}


# The cancelling rows' shapes: short enough that a correct float running sum over the row (Part 1 on the CPU)
# stays within a third of the tolerance, long enough that a 16-bit sum drifts. Rounding the sum to float16 or
# bfloat16 (at every step, once per lane, or the mean once) misses by 6x the tolerance or more (by 15-90x
# at every step).
CANCELLING = [((3, 257), torch.float32), *(((3, n), d) for n in (257, 1025) for d in (torch.float16, torch.bfloat16))]


@selfcheck.sanitizable
def check(device=None, ext=None, seed=None) -> int:
    """backward(grad_y, x, rstd, weight) -> grad_x against autograd on every part you wrote: your CPU loop (Part
    1), and in CUDA mode your kernel (Part 2), over four dtypes, awkward row lengths and counts, random values,
    weights (or none) and eps drawn afresh each run; then rows of zero gradients, rows without a weight, and
    rows where the answer is what is left of a cancellation; on a GPU also a tensor past 2^32 elements."""
    ext = ext or loader.load(OP)
    seed = selfcheck.new_seed(seed)
    formula = (
        "section 1's grad_x = rstd * (g - xhat * mean(g * xhat)), with g = grad_y * weight, xhat = x * rstd and "
        "the mean over the row's n values"
    )
    cases = 0
    with selfcheck.exercise(NAME):
        for dev in selfcheck.parts(device):
            if dev.type == "cuda":
                where = "your kernel (Part 2)"
                hint = (
                    f"{formula}; warp w owns row w (skip w >= M), lane l takes elements l, l + 32, ...; "
                    "norm_engine::lane_sum gives every lane the row's sum; sum in acc_t, never in T"
                )
            else:
                where = "the CPU loop (Part 1)"
                hint = f"{formula}; write grad_x[j] for every j < n, also where grad_y[j] is 0"
            hint += "; see kernels/exercises/rmsnorm_row.cuh"
            title = f"RMSNorm backward of a row, {where}"
            cases += selfcheck.run(
                title,
                _guarded(ext, title, hint, seed),
                reference,
                _inputs,
                device=dev,
                seed=seed,
                shapes_=_shapes(seed),
                hint=hint,
                tolerances=TOLERANCES,
                special=[
                    selfcheck.Case(
                        "rows of zero gradients: grad_x is not zero where grad_y is, unless the whole row's is",
                        (3, 1025),
                        torch.float32,
                        _zero_grad_inputs,
                    ),
                    selfcheck.Case(
                        "rows without a weight (weight=None: ones)", (5, 257), torch.float32, _no_weight_inputs
                    ),
                    *(
                        selfcheck.Case(
                            "rows where grad_x is what is left after g and xhat * mean(g * xhat) cancel: the sum "
                            "in the mean must stay in float (acc_t), never rounded to float16/bfloat16",
                            shape,
                            dtype,
                            cancelling_inputs,
                        )
                        for shape, dtype in CANCELLING
                    ),
                ],
            )
            if dev.type == "cuda":
                large_case(ext, title, hint, seed)
        if not env.cuda_mode():
            print("ℹ️  RMSNorm backward of a row, your kernel (Part 2): runs on a GPU (CPU mode here); skipped.")
    return cases


def _guarded(ext, title: str, hint: str, seed: int):
    """ext.backward writing into a NaN-filled view of a buffer with a guard of SENTINEL before and after, the
    inputs in padded buffers (8 rows past the end: the last block's 7 spare warps, and more); fails the case
    if the guard changed."""

    def yours(grad_y, x, weight, rstd, eps):
        pad = 8 * x.shape[-1] + 64
        gy_p, x_p, rstd_p = (selfcheck.guarded(t, pad, 1.0).view for t in (grad_y, x, rstd))
        out = selfcheck.guarded(torch.full_like(x, float("nan")), pad, SENTINEL)  # never written: stays NaN
        got = ext.backward(gy_p, x_p, rstd_p, weight, out.view)
        outside = out.outside("grad_x")
        if outside:
            where = f"Case {'x'.join(map(str, x.shape))} {str(x.dtype)[6:]} on {x.device}"
            more = " A row has n elements (j < n), and the warps of the last block past row M - 1 write nothing."
            selfcheck.fail(title, where, outside + more, hint=hint, seed=seed)
        return got

    return yours


def large_case(ext, title: str, hint: str, seed: int, n: int = LARGE_N) -> bool:
    """A bfloat16 [M, n] case past element 2^32 where 3 such tensors fit in 80 % of the free GPU memory (an
    offset computed in 32-bit unsigned arithmetic wraps only there), else past 2^31 (a signed one); rows around
    those elements and at both ends compared with the reference. Skipped (and says so) where neither fits."""
    name = f"{title}, past 2^31 elements"
    torch.cuda.empty_cache()  # blocks the caching allocator holds count as free here
    free, _ = torch.cuda.mem_get_info()
    M = next((-(-t // n) for t in ((1 << 32) + 8 * n, (1 << 31) + 8 * n) if 3 * 2 * n * -(-t // n) < 0.8 * free), None)
    if M is None:
        need = 3 * 2 * ((1 << 31) + 8 * n) / 2**30
        print(f"ℹ️  {name}: needs {need:.1f} GiB of GPU memory, {free / 2**30:.1f} GiB are free; skipped.")
        return False
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, n, generator=g, device="cuda", dtype=torch.bfloat16)
    grad_y = torch.randn(M, n, generator=g, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(n, generator=g, device="cuda", dtype=torch.bfloat16)
    eps = 1e-5
    rstd = torch.empty(M, device="cuda", dtype=torch.float32)
    for lo in range(0, M, 1 << 16):  # in slices: float64 copies of the whole tensor would not fit
        rstd[lo : lo + (1 << 16)] = _rstd(x[lo : lo + (1 << 16)], eps)
    where = f"Case {M}x{n} bfloat16 ({M * n} elements, past 2^{32 if M * n > (1 << 32) else 31})"
    try:
        with _check.poisoned():
            got = ext.backward(grad_y, x, rstd, weight)
        torch.cuda.synchronize()
    except RuntimeError as e:
        if "CUDA" not in str(e) and "cuda" not in str(e):
            raise
        selfcheck.fail(
            name,
            where,
            f"your kernel crashed: {str(e).splitlines()[0]}\nA row offset computed in 32 bits wraps past 2^31 "
            "and reads outside the tensors. The CUDA context is now unusable (a sticky error, lesson 00): fix "
            "it, then restart the kernel (Kernel -> Restart) and re-run.",
            hint=hint,
            seed=seed,
        )
    marks = [0, (1 << 31) // n] + ([(1 << 32) // n] if M * n > (1 << 32) else []) + [M - 1]
    for r in marks:
        rows = slice(max(r - 1, 0), min(r + 2, M))
        want = reference(grad_y[rows], x[rows], weight, rstd[rows], eps)
        try:
            _check.assert_close(got[rows], want, name="grad_x")
        except AssertionError as e:
            selfcheck.fail(name, f"{where}, rows {rows.start}..{rows.stop - 1}", str(e), hint=hint, seed=seed)
    del x, grad_y, got
    torch.cuda.empty_cache()
    print(f"✅ {name}: correct past element 2^{32 if M * n > (1 << 32) else 31} ({M} rows of {n}, bfloat16).")
    return True


_CPU_DOT = "  for (int64_t j = 0; j < n; ++j) dot += grad_y[j] * weight[j] * x[j] * rstd;\n"
_CPU_MEAN = "  const T mean_gx = dot / n;\n"
_CPU_OUT = "  for (int64_t j = 0; j < n; ++j) grad_x[j] = rstd * (grad_y[j] * weight[j] - x[j] * rstd * mean_gx);\n"
_CUDA_ROW = "  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;\n"
_CUDA_GUARD = "  if (row >= M) return;  // the whole warp leaves together, so lane_sum below still has all 32 lanes\n"
_CUDA_SUM = (
    "  acc_t dot = 0;\n  for (int j = lane; j < N; j += 32) dot += to_acc(gy[j]) * to_acc(weight[j]) * to_acc(xr[j]);\n"
)
_CUDA_MEAN = "  const acc_t mean_gx = norm_engine::lane_sum(dot) * r / N;\n"
_LARGE_GIB = 3 * 2 * ((1 << 32) + 9 * LARGE_N) / 0.8 / 2**30  # M = ceil((2^32 + 8 n) / n) rows of n

WRONG = [
    Wrong(
        "forgets the weight inside the mean: mean(grad_y * xhat) instead of mean(g * xhat), g = grad_y * weight",
        [(_CPU_DOT, _CPU_DOT.replace(" * weight[j]", ""))],
        "cpu",
    ),
    Wrong("the row's sum where the formula has its mean (no / n)", [(_CPU_MEAN, "  const T mean_gx = dot;\n")], "cpu"),
    Wrong(
        "the mean over n - 1 values (as for an unbiased variance) instead of the row's n",
        [(_CPU_MEAN, "  const T mean_gx = dot / (n - 1);\n")],
        "cpu",
    ),
    Wrong(
        "drops the xhat * mean(g * xhat) term: grad_x = rstd * g",
        [(_CPU_OUT, "  for (int64_t j = 0; j < n; ++j) grad_x[j] = rstd * grad_y[j] * weight[j];\n")],
        "cpu",
    ),
    Wrong(
        "x instead of xhat in the second term (one rstd missing)",
        [(_CPU_OUT, _CPU_OUT.replace("x[j] * rstd * mean_gx", "x[j] * mean_gx"))],
        "cpu",
    ),
    Wrong(
        "keeps LayerNorm's - mean(g) term, which RMSNorm (no mean subtracted in forward) does not have",
        [
            (
                _CPU_MEAN,
                "  T sum_g = 0;\n  for (int64_t j = 0; j < n; ++j) sum_g += grad_y[j] * weight[j];\n"
                "  const T mean_gx = dot / n, mean_g = sum_g / n;\n",
            ),
            (_CPU_OUT, _CPU_OUT.replace("weight[j] - x[j]", "weight[j] - mean_g - x[j]")),
        ],
        "cpu",
    ),
    Wrong(
        "skips the elements whose grad_y is zero (their grad_x is -rstd * xhat * mean(g * xhat), not zero)",
        [(_CPU_OUT, _CPU_OUT.replace("grad_x[j] =", "if (grad_y[j] != 0) grad_x[j] ="))],
        "cpu",
    ),
    Wrong(
        "the output loop runs one past the row (j <= n): it writes grad_x[n], the next row's or past the end",
        [(_CPU_OUT, _CPU_OUT.replace("j < n;", "j <= n;"))],
        "cpu",
    ),
    Wrong(
        "no tail guard: the warps of the last block past row M - 1 read and write rows that do not exist",
        [(_CUDA_GUARD, "")],
        "cuda",
    ),
    Wrong(
        "the row and its offset in 32-bit unsigned arithmetic: row * N wraps past 2^32 elements (the large case "
        "catches it where the GPU has the memory, as on an H100)",
        [(_CUDA_ROW, "  const unsigned row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;\n")],
        "cuda",
        min_free_gib=_LARGE_GIB,
    ),
    Wrong(
        "the warp sum by hand over 16 lanes only (offsets 8, 4, 2, 1): each half-warp gets its own half's sum",
        [
            (
                _CUDA_MEAN,
                "  for (int offset = 8; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);\n"
                "  const acc_t mean_gx = dot * r / N;\n",
            )
        ],
        "cuda",
    ),
    Wrong(
        "the mean from this lane's own elements (no lane_sum)",
        [(_CUDA_MEAN, _CUDA_MEAN.replace("norm_engine::lane_sum(dot)", "dot"))],
        "cuda",
    ),
    Wrong(
        "the running sum kept in T (float16/bfloat16), rounded at every step",
        [
            (
                _CUDA_SUM,
                "  T dot_t = from_acc<T>(acc_t(0));\n"
                "  for (int j = lane; j < N; j += 32)\n"
                "    dot_t = from_acc<T>(to_acc(dot_t) + to_acc(gy[j]) * to_acc(weight[j]) * to_acc(xr[j]));\n"
                "  const acc_t dot = to_acc(dot_t);\n",
            )
        ],
        "cuda",
    ),
    Wrong(
        "the lane's sum rounded to T once, before lane_sum",
        [(_CUDA_MEAN, _CUDA_MEAN.replace("lane_sum(dot)", "lane_sum(to_acc(from_acc<T>(dot)))"))],
        "cuda",
    ),
    Wrong(
        "forgets the weight in the GPU's sum",
        [(_CUDA_SUM, _CUDA_SUM.replace(" * to_acc(weight[j])", ""))],
        "cuda",
    ),
]
