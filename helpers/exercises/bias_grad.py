"""Self-check for lesson 02's bias-gradient exercise: kernels/exercises/bias_grad.cuh, grad_bias[c] = the sum
over rows of grad_y[r][c] where y[r][c] > 0, as backward version 4 of the fused op. It calls
`ext.bias_grad_into(grad_y, y, grad_bias, 4)` (ext = loader.load("fused_bias_relu")), which writes grad_bias
alone into a tensor it is given. Part 1 (the CPU loop) is checked on the CPU, Part 2 (the two-pass block
reduction) on a GPU.

What a wrong answer cannot get past:
* grad_bias is a view into a larger buffer whose other bytes hold a sentinel, and grad_y and y are views
  with NaN (grad_y) and 1 (y) around them: a kernel that writes past the end of grad_bias, or reads a row
  past the end of its tile or of the tensor, fails;
* shapes whose rows are not a multiple of the tile (1, 255, 257, 4097 rows), one column, 70001 columns,
  more rows than 1024 tiles of 256 (longer tiles), gradients that are zero, masks that stop half of them;
* a sum kept in float16/bfloat16 anywhere before the end (the thread's sum, the shared memory, a partial):
  fixed inputs whose columns add large partial sums that cancel, so any rounding to 16 bits shows, on every
  run;
* a missing __syncthreads() between the steps of the shared-memory reduction: a data race, whose result
  depends on how the warps of a block happen to be scheduled. The self-check runs a large float32 case
  (8192 blocks of 16 warps) many times and requires the reference's value and the same bits every time;
  a correct kernel adds in a fixed order, so its bits never change;
* an index computed in 32 bits: a tensor of more than 2^32 elements (2^31 where memory is short) where the
  GPU has the memory.
"""

from __future__ import annotations

import torch

from .. import check as _check
from .. import env, loader, selfcheck
from . import Wrong

OP = "fused_bias_relu"
NAME = "bias_grad"
VERSION = 4  # backward v4: grad_bias by your kernels (v3 is the course's one thread per column)
SENTINEL = -4096.0  # exact in every dtype; what the bytes around grad_bias must still hold


def reference(grad_y: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    g = grad_y.double() * (y.double() > 0)
    return g.reshape(-1, y.shape[-1]).sum(0).to(y.dtype)


def _in_guard(t: torch.Tensor, fill: float) -> torch.Tensor:
    """t as a view into a larger buffer whose other elements are `fill`, each side: a whole tile of 256 rows
    (a tile that runs on past the end reads only guard), or one row for very wide tensors; plus 64 elements."""
    cols = t.shape[-1]
    return selfcheck.guarded(t, cols * (256 if cols * 256 <= 1 << 22 else 1) + 64, fill).view


def _guarded(grad_y: torch.Tensor, y: torch.Tensor):
    # Past either end, y lets the gradient through and grad_y is NaN: a row read past its tile's end (or the
    # tensor's) makes a column NaN.
    return _in_guard(grad_y, float("nan")), _in_guard(y, 1.0)


def _inputs(shape, dtype, device, g):
    """y = relu(z) for random z (about half of it 0: the mask), grad_y random with about 1 in 8 exactly 0 and
    one row all 0 (a zero gradient is a value like any other)."""
    z = torch.randn(shape, generator=g, dtype=torch.float64) + torch.randn(shape[-1], generator=g, dtype=torch.float64)
    y = torch.relu(z).to(dtype)
    grad_y = torch.randn(shape, generator=g) * (torch.rand(shape, generator=g) > 0.125)
    rows = grad_y.reshape(-1, shape[-1])
    rows[int(torch.randint(0, rows.shape[0], (1,), generator=g))] = 0
    return _guarded(grad_y.to(device=device, dtype=dtype), y.to(device))


def _zero_inputs(shape, dtype, device, g):
    grad_y, y = _inputs(shape, dtype, device, g)
    return _guarded(torch.zeros_like(grad_y), y)


def _last_row_inputs(shape, dtype, device, g):
    """The last row of the tensor (alone in the last tile) lets every gradient through, each of them 64."""
    grad_y, y = (t.clone() for t in _inputs(shape, dtype, device, g))
    grad_y[-1], y[-1] = 64.0, 1.0
    return _guarded(grad_y, y)


def _cancelling_inputs(shape, dtype, device, g):
    """Fixed inputs (the same on every run, whatever the seed): in every column the first half of the rows adds
    values in [0.5, 1.5), the second half subtracts others, about 1 in 8 masked. A tile of 256 rows (or 16 of
    them, one thread's share) sums to a few hundred (or a dozen), while the column's total is a few tens: a
    partial rounded to float16 or bfloat16 (spacing 0.25 or 2 at 256) leaves an error many times the
    tolerance. Checked: each way of rounding to 16 bits misses in most of the 64 columns; float32 sums pass."""
    fixed = torch.Generator().manual_seed(20240229)
    rows, cols = shape
    v = (torch.rand(shape, generator=fixed) + 0.5).to(torch.bfloat16).double()  # exact in float16 as well
    v[rows // 2 :] *= -1
    y = (torch.rand(shape, generator=fixed) > 0.125).double()
    return _guarded(v.to(device=device, dtype=dtype), y.to(device=device, dtype=dtype))


# The awkward shapes, every dtype: rows not a multiple of the tile of 256 (1, 3, 255, 257, 4097, 5000), a
# tail tile of one row, one column, columns not a multiple of the block's 32, many columns.
SHAPES = [(1, 1), (1, 300), (3, 1), (255, 33), (257, 5), (513, 64), (4097, 45), (5000, 1), (300, 1151), (2, 3, 5)]

SPECIAL = [
    selfcheck.Case("many columns: 70001, not a multiple of 32 or 256", (2, 70001), torch.float32, _inputs),
    selfcheck.Case(
        "more rows than 1024 tiles of 256: the course's launcher makes the tiles longer (rows_per_block > 256)",
        (300001, 3),
        torch.bfloat16,
        _inputs,
    ),
    selfcheck.Case(
        "grad_y all zero: grad_bias is 0, and every element of it is written", (300, 70), torch.float16, _zero_inputs
    ),
    selfcheck.Case(
        "the last row, alone in the last tile of rows: it belongs to the sum",
        (513, 40),
        torch.float32,
        _last_row_inputs,
    ),
    selfcheck.Case(
        "the rule: add in Acc<T> (float) until the end, never in T. These columns add tiles of 256 rows worth a few "
        "hundred that cancel to a few tens: a sum or partial rounded to bfloat16 anywhere is off by several",
        (8192, 64),
        torch.bfloat16,
        _cancelling_inputs,
    ),
    selfcheck.Case(
        "the rule: add in Acc<T> (float) until the end, never in T (the same columns in float16)",
        (8192, 64),
        torch.float16,
        _cancelling_inputs,
    ),
]

# float32 sums of up to ~300k terms in another order than float64's
TOLERANCES = {torch.float32: dict(rtol=1e-5, atol=1e-3)}


def _shapes(seed: int) -> list[tuple[int, ...]]:
    g = torch.Generator().manual_seed(seed)
    drawn = [
        (int(torch.randint(1, 3000, (1,), generator=g)), int(torch.randint(1, 300, (1,), generator=g)))
        for _ in range(3)
    ]
    return SHAPES + drawn


def _hint(device: torch.device) -> str:
    if device.type == "cpu":
        return (
            "for each column, add grad_y[r * cols + c] over the rows where y there is > 0, starting from 0; "
            "see kernels/exercises/bias_grad.cuh Part 1"
        )
    return (
        "pass 1: each thread adds its share of the block's tile of rows (the tile ends at rows for the last "
        "block) in Acc<T>, stores it in shared memory, and the block adds the 16 lanes of each column in a tree, "
        "with a barrier after the stores and after every step; one thread per column writes the partial. Pass 2: "
        "every partial of the column, p = 0 .. parts - 1, and no thread past cols. Index with int64_t; see "
        "kernels/exercises/bias_grad.cuh Part 2"
    )


def _call(ext, title: str, seed: int):
    """yours(grad_y, y): grad_bias by ext.bias_grad_into, written into a view of a sentinel-filled buffer (the
    view itself NaN first: an element never written stays NaN); a byte written past it fails the check."""

    def yours(grad_y, y):
        cols = grad_y.shape[-1]
        out = selfcheck.guarded(
            torch.full((cols,), float("nan"), dtype=grad_y.dtype, device=grad_y.device), 256, SENTINEL
        )
        ext.bias_grad_into(grad_y, y, out.view, VERSION)
        outside = out.outside("grad_bias")
        if outside:
            where = f"Case {'x'.join(map(str, grad_y.shape))} {str(grad_y.dtype).replace('torch.', '')}"
            selfcheck.fail(
                title, where, outside + " (here: no thread past the last column)", hint=_hint(grad_y.device), seed=seed
            )
        return out.view

    return yours


def _race_case(yours, title: str, seed: int, repeats: int = 30) -> int:
    """A float32 [16384, 4096] case (128 x 64 blocks of 16 warps), `repeats` times: each result must match the
    reference, and every run must give the same bits (a fixed order of additions does; a data race does not)."""
    if selfcheck.sanitizing():  # racecheck sees a race in one run; the repeats only make it likely to show
        repeats = 1
    g = torch.Generator().manual_seed(seed)
    shape = (16384, 4096)
    grad_y, y = _inputs(shape, torch.float32, torch.device("cuda"), g)
    want = reference(grad_y, y)
    return selfcheck.same_every_run(
        title,
        lambda: yours(grad_y, y),
        want,
        name="grad_bias",
        case="a 16384x4096 float32 case on cuda",
        repeats=repeats,
        tolerances=TOLERANCES[torch.float32],
        hint=_hint(grad_y.device),
        seed=seed,
        why="the shared-memory reduction step by step: a thread may read its partner's value only after "
        "the partner wrote it, which only __syncthreads() guarantees across the warps of a block "
        "(without it the result depends on how the warps happen to be scheduled)",
    )


def _large_inputs(rows: int, cols: int):
    """bfloat16, y = 1 everywhere, grad_y = 1 on the last 1024 rows and 0 elsewhere: every column sums to 1024.
    An index that wraps past 2^32 (or goes negative past 2^31) reads the zeros of the first rows instead."""
    y = torch.ones(rows, cols, dtype=torch.bfloat16, device="cuda")
    grad_y = torch.zeros(rows, cols, dtype=torch.bfloat16, device="cuda")
    grad_y[-1024:] = 1
    return grad_y, y


LARGE_COLS = 4099  # not a multiple of 32: the last block of columns has a tail


def _large_case(yours, title: str, seed: int) -> bool:
    """The 64-bit index: more than 2^32 elements (2^31 where memory is short); skipped without the memory."""
    if selfcheck.sanitizing():
        print(f"ℹ️  {title}: the > 2^31-element case is left out under compute-sanitizer (it would take minutes).")
        return False
    free = torch.cuda.mem_get_info()[0]
    for numel in ((1 << 32) + (1 << 21), (1 << 31) + (1 << 21)):
        rows = -(-numel // LARGE_COLS)
        if 2 * rows * LARGE_COLS * 2 < 0.8 * free:
            break
    else:
        print(f"ℹ️  {title}: the > 2^31-element case needs about 8 GiB of free GPU memory; skipped.")
        return False
    grad_y, y = _large_inputs(rows, LARGE_COLS)
    where = f"Case {rows}x{LARGE_COLS} bfloat16 ({rows * LARGE_COLS} elements, past 2^{32 if numel > 1 << 32 else 31})"
    try:
        got = yours(grad_y, y)
        torch.cuda.synchronize()
    except RuntimeError as e:
        if "CUDA" not in str(e) and "cuda" not in str(e):
            raise
        selfcheck.fail(
            title,
            where,
            f"your kernel crashed: {str(e).splitlines()[0]}\nAn index that wraps past 2^31 (a 32-bit int) goes "
            "negative and reads before the tensor. The CUDA context is now unusable (a sticky error, lesson 00): "
            "fix the index, then restart the kernel (Kernel -> Restart) and re-run.",
            hint=_hint(torch.device("cuda")),
            seed=seed,
        )
    want = torch.full((LARGE_COLS,), 1024.0, dtype=torch.bfloat16, device="cuda")
    try:
        _check.assert_close(got, want, name="grad_bias")
    except AssertionError as e:
        selfcheck.fail(
            title,
            where,
            str(e),
            hint=_hint(torch.device("cuda")),
            seed=seed,
            why="an index past 2^31 and 2^32: r * cols + c must be computed in 64 bits (int64_t)",
        )
    del grad_y, y, got
    torch.cuda.empty_cache()
    print(f"✅ {title}: correct on {rows * LARGE_COLS} elements (past 2^{32 if numel > 1 << 32 else 31}).")
    return True


@selfcheck.sanitizable
def check(device=None, ext=None, seed=None) -> int:
    """grad_bias of ext.bias_grad_into(grad_y, y, grad_bias, 4) against the float64 sum, on every part you
    wrote: the CPU loop (Part 1), and in CUDA mode your two kernels (Part 2), with grad_bias inside a guarded
    buffer; on a GPU also the repeated race case and the > 2^31-element case."""
    ext = ext or loader.load(OP)
    seed = selfcheck.new_seed(seed)
    cases = 0
    with selfcheck.exercise(NAME):
        for dev in selfcheck.parts(device):
            where = "your two kernels (Part 2)" if dev.type == "cuda" else "your CPU loop (Part 1)"
            title = f"bias gradient (backward v4), {where}"
            yours = _call(ext, title, seed)
            cases += selfcheck.run(
                title,
                yours,
                reference,
                _inputs,
                device=dev,
                seed=seed,
                shapes_=_shapes(seed),
                special=SPECIAL,
                hint=_hint(dev),
                tolerances=TOLERANCES,
            )
            if dev.type == "cuda":
                cases += _race_case(yours, title, seed)
                cases += _large_case(yours, title, seed)
        if not env.cuda_mode():
            print("ℹ️  bias gradient (backward v4), your two kernels (Part 2): checked on a GPU only; skipped.")
    return cases


_CPU_LOOP = "      if (y[r * cols + c] > 0) sum += grad_y[r * cols + c];"
_GPU_LOOP = "      if (to_acc(y[r * cols + c]) > 0) sum += to_acc(grad_y[r * cols + c]);"
_TILE_END = "  const int64_t end = min(rows, first + rows_per_block);"

WRONG = [
    Wrong(
        "no relu': every grad_y is added, also where relu stopped the gradient (y == 0)",
        [(_CPU_LOOP, "      sum += grad_y[r * cols + c];")],
        "cpu",
    ),
    Wrong(
        "the sum is not reset per column: column c also gets the sums of columns 0..c-1",
        [
            (
                "  for (int64_t c = 0; c < cols; ++c) {\n    T sum = 0;\n",
                "  T sum = 0;\n  for (int64_t c = 0; c < cols; ++c) {\n",
            )
        ],
        "cpu",
    ),
    Wrong(
        "rows and columns swapped in the index (element [r][c] read at c * rows + r)",
        [(_CPU_LOOP, "      if (y[c * rows + r] > 0) sum += grad_y[c * rows + r];")],
        "cpu",
    ),
    Wrong(
        "no __syncthreads() between the steps of the tree: a thread may read its partner's sum before the "
        "partner's warp added into it (a data race; the repeated 16384x4096 case sees run-to-run differences)",
        [("    __syncthreads();\n  }\n", "  }\n")],
        "cuda",
    ),
    Wrong(
        "no relu' in the kernel: every row's grad_y is summed, also where y == 0",
        [(_GPU_LOOP, "      sum += to_acc(grad_y[r * cols + c]);")],
        "cuda",
    ),
    Wrong(
        "each block's partial sum rounded to T before it is stored (float16/bfloat16 partials)",
        [
            (
                "partials[blockIdx.y * cols + c] = sums[0][threadIdx.x];",
                "partials[blockIdx.y * cols + c] = to_acc(from_acc<T>(sums[0][threadIdx.x]));",
            )
        ],
        "cuda",
    ),
    Wrong(
        "each thread's sum kept in T: in float16/bfloat16 every addition rounds",
        [
            ("  Acc<T> sum = 0;\n  if (c < cols)", "  T sum = from_acc<T>(0);\n  if (c < cols)"),
            (
                _GPU_LOOP,
                "      if (to_acc(y[r * cols + c]) > 0) sum = from_acc<T>(to_acc(sum) + to_acc(grad_y[r * cols + c]));",
            ),
            ("  sums[threadIdx.y][threadIdx.x] = sum;", "  sums[threadIdx.y][threadIdx.x] = to_acc(sum);"),
        ],
        "cuda",
    ),
    Wrong(
        "the element index kept in a 32-bit unsigned int: it wraps past 2^32 elements and reads the first rows "
        "again (the > 2^32-element case catches it where the GPU has the memory, as on an H100)",
        [
            (
                _GPU_LOOP,
                "      {\n        const unsigned i = r * cols + c;\n"
                "        if (to_acc(y[i]) > 0) sum += to_acc(grad_y[i]);\n      }",
            )
        ],
        "cuda",
        min_free_gib=2 * (((1 << 32) + (1 << 21)) // LARGE_COLS + 1) * LARGE_COLS * 2 / 0.8 / 2**30,
    ),
    Wrong(
        "pass 2 stops one partial short (p < parts - 1): the last tile of rows is never added",
        [("for (int64_t p = 0; p < parts; ++p)", "for (int64_t p = 0; p < parts - 1; ++p)")],
        "cuda",
    ),
    Wrong(
        "the last tile ends one row early (min(rows - 1, ...)): the tensor's last row is never added",
        [(_TILE_END, "  const int64_t end = min(rows - 1, first + rows_per_block);")],
        "cuda",
    ),
    Wrong(
        "the last tile is not cut at rows: it reads rows past the end of grad_y and y",
        [(_TILE_END, "  const int64_t end = first + rows_per_block;")],
        "cuda",
    ),
    Wrong(
        "pass 2's column check one off (c > cols): thread c == cols writes one element past grad_bias",
        [
            (
                "  if (c >= cols) return;\n  Acc<T> sum = 0;\n  for (int64_t p",
                "  if (c > cols) return;\n  Acc<T> sum = 0;\n  for (int64_t p",
            )
        ],
        "cuda",
    ),
]
