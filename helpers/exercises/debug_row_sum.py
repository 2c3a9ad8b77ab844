"""Self-check for lesson 07's first exercise: kernels/exercises/debug_row_sum.cuh, find and fix. Row sums of a
float32 matrix by `ext.row_sum_into(x, out)` (ext = loader.load("debugging")): Part 1, the CPU loop, checked on
the CPU; Part 2, the block reduction in shared memory, on a GPU.

What a wrong answer cannot get past:
* unwritten or partly written outputs: `out` is NaN first, inside a guard buffer (a write past it shows);
  x sits inside NaN, so a read past a row's end into the guard makes that sum NaN;
* the CPU loop's bug (one element too many per row): every row but the last takes the next row's first
  element, the last one the NaN guard;
* uninitialized shared memory: rows shorter than the block of 256 threads, launched right after a launch
  that leaves large values in every slot of shared memory (what a slot holds before anyone writes it is
  whatever the last block on that SM left there), so an unwritten slot that the tree adds shows;
* the missing barriers: a large case run many times must match the reference with the same bits every time
  (a fixed order of additions gives the same bits; a data race does not);
* deleting the work: an empty kernel leaves NaN.
`check(sanitize=True)` first runs the GPU part under compute-sanitizer (memcheck and racecheck) in a child
process and shows its reports."""

from __future__ import annotations

import torch

from .. import check as _check
from .. import env, loader, selfcheck
from . import Wrong

OP = "debugging"
NAME = "debug_row_sum"
SENTINEL = -4096.0
# One float32 running sum over up to 65539 values of about 1 (the CPU loop) is off by up to ~1e-2 relative to
# float64; a missing or extra element is off by about 1.
TOLERANCES = {torch.float32: dict(rtol=1e-4, atol=2e-2)}
SHAPES = [(1, 1), (3, 5), (7, 31), (5, 256), (4, 257), (33, 1000), (2, 4097), (1, 65539), (300, 3)]


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.double().sum(1).float()


def _inputs(shape, dtype, device, g):
    x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return (selfcheck.guarded(x, 64, float("nan")).view,)


def _shapes(seed: int) -> list[tuple[int, int]]:
    g = torch.Generator().manual_seed(seed)
    return SHAPES + [(int(torch.randint(1, 300, (1,), generator=g)), int(torch.randint(1, 3000, (1,), generator=g)))]


def _hint(device: torch.device) -> str:
    if device.type == "cpu":
        return "how many elements does a row have, and which ones does the inner loop visit? Part 1 of the file"
    return (
        "run check(sanitize=True): racecheck names the two lines that race on shared memory. A slot nobody "
        "wrote no tool reports (a row of zeros that does not sum to 0 shows it): every thread writes its slot, 0 "
        "if it has nothing to add, and __syncthreads() separates each write of shared memory from other warps' "
        "reads of it"
    )


def _call(ext, title: str, seed: int):
    def yours(x):
        out = selfcheck.guarded(torch.full((x.shape[0],), float("nan"), device=x.device), 64, SENTINEL)
        ext.row_sum_into(x, out.view)
        outside = out.outside("out")
        if outside:
            selfcheck.fail(title, f"Case {'x'.join(map(str, x.shape))} on {x.device}", outside, seed=seed)
        return out.view

    return yours


def _dirty_shared_memory(ext) -> None:
    """Launch the kernel on rows of 512 values of 1e6: every block writes all 256 slots with ~2e6. A slot that
    the next launch's blocks never write still holds that (what a slot holds before anyone writes it is not
    defined; in practice, whatever the previous block on that SM left)."""
    wide = torch.full((4096, 512), 1e6, device="cuda")
    ext.row_sum_into(wide, torch.empty(4096, device="cuda"))


def _short_rows_case(ext, yours, title: str, seed: int) -> int:
    rows = 200 if selfcheck.sanitizing() else 20000  # fewer blocks under the tool: its runs are 10-100x slower
    g = torch.Generator().manual_seed(seed)
    (x,) = _inputs((rows, 100), torch.float32, torch.device("cuda"), g)
    _dirty_shared_memory(ext)
    got = yours(x)
    try:
        _check.assert_close(got, reference(x), name="out", **TOLERANCES[torch.float32])
    except AssertionError as e:
        selfcheck.fail(
            title,
            f"Case {rows}x100 float32 on cuda, right after a launch that filled shared memory",
            str(e),
            hint=_hint(got.device),
            seed=seed,
            why="rows of 100 values, shorter than the block of 256 threads: threads 100..255 have nothing to add, "
            "but the tree adds their slots all the same, so they must hold 0, not what was there before",
        )
    return 1


def _race_case(yours, title: str, seed: int, repeats: int = 20) -> int:
    rows = 65536
    if selfcheck.sanitizing():  # racecheck sees a race in one run of a few blocks; repeats only make it show
        rows, repeats = 64, 1
    g = torch.Generator().manual_seed(seed)
    (x,) = _inputs((rows, 1000), torch.float32, torch.device("cuda"), g)
    return selfcheck.same_every_run(
        title,
        lambda: yours(x),
        reference(x),
        name="out",
        case=f"a {rows}x1000 float32 case on cuda",
        repeats=repeats,
        tolerances=TOLERANCES[torch.float32],
        hint=_hint(x.device),
        seed=seed,
        why="the tree in shared memory step by step: a warp may read a slot another warp writes only after "
        "a __syncthreads() between the two (without it the result depends on how the warps are scheduled)",
    )


@selfcheck.sanitizable
def check(device=None, ext=None, seed=None) -> int:
    """Your row sums against float64 sums: the CPU loop (Part 1), and on a GPU the kernel (Part 2), including
    short rows after a launch that leaves shared memory full of values, and a large case run again and again (a race shows in some runs only).
    sanitize=True first runs the GPU part under compute-sanitizer in a child process and shows the reports."""
    seed = selfcheck.new_seed(seed)
    ext = ext or loader.load(OP)
    cases = 0
    with selfcheck.exercise(NAME):
        for dev in selfcheck.parts(device):
            title = f"row sums, {'the kernel (Part 2)' if dev.type == 'cuda' else 'the CPU loop (Part 1)'}"
            yours = _call(ext, title, seed)
            cases += selfcheck.run(
                title,
                yours,
                reference,
                _inputs,
                device=dev,
                dtypes=(torch.float32,),
                shapes_=_shapes(seed),
                hint=_hint(dev),
                tolerances=TOLERANCES,
                seed=seed,
            )
            if dev.type == "cuda":
                cases += _short_rows_case(ext, yours, title, seed)
                cases += _race_case(yours, title, seed)
        if not env.cuda_mode():
            print("ℹ️  row sums, the kernel (Part 2): checked on a GPU only; skipped.")
    return cases


WRONG = [
    Wrong(
        "the CPU loop fixed by stopping one element early (c < cols - 1): the last element of each row is left out",
        [
            (
                "    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];",
                "    for (int64_t c = 0; c < cols - 1; ++c) s += x[r * cols + c];",
            )
        ],
        "cpu",
    ),
    Wrong(
        "the CPU loop's sum not reset per row (declared outside the row loop)",
        [
            (
                "  for (int64_t r = 0; r < rows; ++r) {\n    float s = 0.f;\n    for (int64_t c = 0; c < cols; ++c)",
                "  float s = 0.f;\n  for (int64_t r = 0; r < rows; ++r) {\n    for (int64_t c = 0; c < cols; ++c)",
            )
        ],
        "cpu",
    ),
    Wrong(
        "only the barriers fixed: threads past a short row's end still leave their slot unwritten",
        [
            (
                "  float s = 0.f;\n  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];\n"
                "  partial[threadIdx.x] = s;  // every thread writes its slot, 0 if the row is shorter than the block\n",
                "  if (threadIdx.x < cols) {\n    float s = 0.f;\n"
                "    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];\n"
                "    partial[threadIdx.x] = s;\n  }\n",
            )
        ],
        "cuda",
    ),
    Wrong(
        "the barrier after the writes added, but none between the steps of the tree (a data race)",
        [("    __syncthreads();  // this step's sums written before the next step reads them\n", "")],
        "cuda",
    ),
    Wrong(
        "the slots initialized, but the barrier after the writes left out (a warp adds slots not written yet)",
        [("  __syncthreads();           // every slot written before any thread reads another's\n", "")],
        "cuda",
    ),
]
