"""Benchmark sweeps declared as data, as Triton's perf_report(Benchmark(...)) does: each benchmarks/<op>.py
says WHAT it sweeps (one Spec: shapes per device, dtypes) and HOW to time one case (`measure`); the loop,
the labels, the fresh torch.compile per shape and the table are here, once, for every op.

    SPEC = sweep.Spec(
        gpu=[(4096, 4096), (8192, 8192), (32768, 1024)],   # the headline shapes (--quick)
        gpu_more=[(1 << k,) for k in range(16, 27, 2)],    # added without --quick
        cpu=[(1024, 1024)],
        cpu_more=[(1 << 14,), (1 << 18,)],
    )

    def measure(case: sweep.Case) -> list[dict]:           # one shape and dtype -> bench.compare rows
        x = case.randn()
        compiled = torch.compile(reference, dynamic=False)  # compiled afresh per case (run resets dynamo)
        fns = {"ours": lambda: ext.forward(x), "native": lambda: reference(x), "torch.compile": lambda: compiled(x)}
        return bench.compare(fns, nbytes=2 * case.numel * case.element_size, device=case.device,
                             op="poly fwd", **case.labels)

`python -m benchmarks.run` runs every module's SPEC through `run(SPEC, measure, device, quick)`, and prints
`table(rows)`: bench.table's one line per row, here the "ours" rows with their speed-up over native PyTorch
and torch.compile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from helpers import bench

Shape = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Spec:
    """The shapes and dtypes one op is timed at. On a GPU: `gpu` (the headline, all that --quick runs),
    then `gpu_more`; on the CPU (small, so that CI stays quick): `cpu`, then `cpu_more`. Every shape is
    timed in every dtype, dtype by dtype. `report(rows)`, if given, returns lines printed after the sweep
    on a GPU (targets met or missed, say)."""

    gpu: list[Shape]
    gpu_more: list[Shape] = dataclasses.field(default_factory=list)
    cpu: list[Shape] = dataclasses.field(default_factory=lambda: [(1024, 1024)])
    cpu_more: list[Shape] = dataclasses.field(default_factory=list)
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16)
    report: Callable[[list[dict]], str] | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    """One shape and dtype on one device, with the labels every row of it carries."""

    shape: Shape
    dtype: torch.dtype
    device: str

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def labels(self) -> dict:
        """shape "4096x4096", dtype "bfloat16", numel, and rows x cols (the last dimension is cols)."""
        cols = self.shape[-1] if self.shape else 1
        return dict(
            shape="x".join(map(str, self.shape)),
            dtype=str(self.dtype).replace("torch.", ""),
            numel=self.numel,
            rows=self.numel // max(cols, 1),
            cols=cols,
        )

    def randn(self, shape: Shape | None = None, *, seed: int = 0) -> torch.Tensor:
        """Random normal data of this case's dtype on its device (its shape unless given), the same in every
        run. Never time a kernel on zeros: they compress, and they are not your data."""
        g = torch.Generator(device=self.device).manual_seed(seed)
        return torch.randn(shape or self.shape, device=self.device, dtype=self.dtype, generator=g)


def cases(spec: Spec, device: str, quick: bool = False) -> list[Case]:
    """Every (shape, dtype) the spec asks for on `device`: dtype by dtype, the headline shapes first."""
    gpu = torch.device(device).type == "cuda"
    shapes = list(spec.gpu if gpu else spec.cpu)
    if not quick:
        shapes += spec.gpu_more if gpu else spec.cpu_more
    return [Case(tuple(shape), dtype, str(device)) for dtype in spec.dtypes for shape in shapes]


def run(spec: Spec, measure: Callable[[Case], list[dict]], device: str, quick: bool = False, *, progress=True):
    """measure(case) for every case of the spec, with torch.compile's caches reset before each (a fresh
    compile per shape: no recompile limit, no dynamic shapes). Returns all the rows."""
    rows = []
    for case in cases(spec, device, quick):
        torch._dynamo.reset()
        rows += measure(case)
        if progress:
            print(f"  {case.labels['shape']:>12} {case.labels['dtype']}", flush=True)
    if spec.report and torch.device(device).type == "cuda":
        print(spec.report(rows), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """The suite's summary: the "ours" rows, with their speed-up over native PyTorch and torch.compile."""
    return bench.table(rows, baseline=("native", "torch.compile"), impls=("ours",))
