"""What does a step run, and what limits it? torch.profiler over a small model, a timeline of one step, a
launch-, memory- or compute-bound verdict for one op, and Nsight Compute's DRAM throughput where it may run.

    model = profile.small_model(course=True, device=device)    # a pre-norm MLP block on the course's ops
    p = profile.model_step_profile(model, model.example_input())
    print(p.table())                                           # ops by share of the step; p.trace_path
    profile.timeline(p)                                        # one bar per kernel: gaps are the GPU waiting
    b = profile.bound(lambda: f(x), bytes_moved=2 * x.nbytes, flops=0)      # GPU only
    print(b.describe())                                        # verdict, the rule that decided it, numbers
    ok, why = profile.ncu_available()
    r = profile.ncu_memory_throughput(SCRIPT, "rms_norm|triton")           # dict, or None without ncu/GPU

In CPU mode the profiler records CPU operators where a GPU has kernels: every number and figure here has a
CPU meaning (an operator's self time, the Python and autograd time between operators). `bound` and the ncu
functions measure the GPU only: on the CPU they print why and return None.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import glob
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

from . import bench, env

STEP = "model_step_profile: step"  # the record_function range around each profiled step

# ------------------------------------------------------------------------------------------------ a small model


class Polynomial(nn.Module):
    """a*x^3 + b*x^2 + c*x + d with learned coefficients: course::polynomial, or its 7-kernel eager reference."""

    def __init__(self, course: bool, device=None, dtype=None):
        super().__init__()
        self.course, self.coeffs = course, nn.Parameter(torch.tensor([0.02, 0.1, 1.0, 0.0], device=device, dtype=dtype))

    def forward(self, x):
        from .ops import polynomial

        return (polynomial.polynomial if self.course else polynomial.reference)(x, self.coeffs)


class Block(nn.Module):
    """x + dropout(fc2(act(fc1(norm(x))))): a transformer's pre-norm MLP sublayer."""

    def __init__(self, dim, hidden, *, norm, activation, p, course, device, dtype):
        super().__init__()
        from .ops import dropout, fused_bias_relu, layernorm, rmsnorm

        f = {"device": device, "dtype": dtype}
        norms = {"layer": layernorm.LayerNorm, "rms": rmsnorm.RMSNorm} if course else {}
        self.norm = norms.get(norm, {"layer": nn.LayerNorm, "rms": nn.RMSNorm}[norm])(dim, **f)
        if activation == "relu" and course:  # the bias add and the relu in one kernel after the matmul
            self.fc1, self.act = fused_bias_relu.LinearReLU(dim, hidden, **f), nn.Identity()
        else:
            self.fc1 = nn.Linear(dim, hidden, **f)
            acts = {"relu": nn.ReLU, "gelu": nn.GELU, "polynomial": lambda: Polynomial(course, **f)}
            self.act = acts[activation]()
        self.fc2 = nn.Linear(hidden, dim, **f)
        self.drop = dropout.Dropout(p) if course else nn.Dropout(p)

    def forward(self, x):
        return x + self.drop(self.fc2(self.act(self.fc1(self.norm(x)))))


class SmallModel(nn.Sequential):
    def example_input(self, rows: int = 64) -> torch.Tensor:
        """A (rows, dim) batch of random values on the model's device and dtype (never zeros)."""
        w = self[0].fc2.weight
        return torch.randn(rows, w.shape[0], device=w.device, dtype=w.dtype)


def small_model(
    dim: int = 256,
    hidden: int = 1024,
    depth: int = 2,
    *,
    norm: str = "layer",
    activation: str = "relu",
    dropout: float = 0.1,
    course: bool = False,
    device=None,
    dtype=None,
) -> SmallModel:
    """`depth` pre-norm MLP blocks, x + dropout(fc2(act(fc1(norm(x))))), of plain torch modules, or with
    course=True on the course's ops: norm="layer"/"rms" is course::layer_norm / course::rms_norm,
    activation="relu" is fused_bias_relu's LinearReLU (fc1's bias add and the relu in one kernel),
    "polynomial" is course::polynomial (native: lesson 01's eager reference, 7 kernels), dropout is
    course::dropout. "gelu" stays native either way (the course has no GELU op), and so do the matmuls. The
    defaults (2 blocks, 256 -> 1024 -> 256, 64 rows: about 400 MFLOP a training step) profile in well under a
    second on a T4 and in CPU mode. course=True compiles the ops' extensions the first time (a minute or
    two), then loads them from the cache. device defaults to the lessons' (CUDA in CUDA mode)."""
    kw = dict(
        norm=norm, activation=activation, p=dropout, course=course, device=env.default_device(device), dtype=dtype
    )
    return SmallModel(*(Block(dim, hidden, **kw) for _ in range(depth)))


# ------------------------------------------------------------------------------------------------ a profiled step

# Op families for the timeline's colours, the first match wins: "addmm" is a matmul before it is an add.
FAMILIES = (
    ("matmul", ("mm", "matmul", "linear", "gemm", "cublas", "cutlass", "xmma")),
    ("norm", ("norm",)),
    ("dropout", ("dropout", "bernoulli", "philox")),
    ("activation", ("relu", "gelu", "polynomial", "threshold", "tanh", "silu")),
    ("reduction", ("sum", "mean", "reduce")),
    ("copy/fill", ("copy", "fill", "zero", "memset", "memcpy", "clone")),
    ("elementwise", ("add", "mul", "sub", "div", "pow", "elementwise", "vectorized")),
)
# Operators that move no data (views, allocations, a no-op .to()): a GPU runs no kernel for them, so CPU mode
# does not count them either, unless an operator they call moves data (a reshape that has to copy).
NO_DATA = {"t", "view", "_unsafe_view", "transpose", "reshape", "_reshape_alias", "expand", "as_strided", "permute"}
NO_DATA |= {"unsqueeze", "squeeze", "flatten", "select", "slice", "unbind", "split", "chunk", "narrow", "detach"}
NO_DATA = {f"aten::{n}" for n in NO_DATA | {"alias", "to", "contiguous", "empty", "empty_like", "empty_strided"}}


def family(name: str) -> str:
    low = name.lower()
    return next((fam for fam, keys in FAMILIES if any(k in low for k in keys)), "other")


def short(name: str, width: int = 60) -> str:
    """A kernel's or op's name without its return type, common namespaces, template arguments and parameters."""
    if name.startswith("("):
        return name
    for prefix in ("void ", "at::native::", "(anonymous namespace)::", "norm_engine::"):
        name = name.replace(prefix, "")
    name = name.split("(")[0].split("<")[0]
    return name if len(name) <= width else name[: width - 3] + "..."


@dataclasses.dataclass(frozen=True)
class OpRow:
    name: str  # aten::addmm, course::layer_norm, ...; "(...)": time outside any op, or the autograd engine's
    calls: float  # per step
    self_us: float  # per step: its kernels' GPU time (CPU mode: its own CPU time, its callees' left out)
    cpu_us: float  # per step: its own CPU time (dispatch, launches); the same as self_us in CPU mode
    share: float  # % of the step's wall time under the profiler


@dataclasses.dataclass(frozen=True)
class Launch:
    """One bar of the timeline: a CUDA kernel (CPU mode: a top-level operator) of one step."""

    name: str
    op: str  # the innermost operator that launched it
    course: bool  # launched inside one of the course's ops
    start_us: float  # from the step's start
    end_us: float


@dataclasses.dataclass
class StepProfile:
    device: str
    backward: bool
    kernels_per_step: float  # CUDA kernels, memsets and copies (CPU mode: top-level operators that move data)
    step_us: float  # median wall time of one step without the profiler (bench.wall)
    profiled_step_us: float  # the same under the profiler (a microsecond or two more per op): the shares' 100 %
    rows: list[OpRow]  # largest share first
    launches: list[Launch]  # one step's, in start order
    trace_path: Path

    @property
    def what(self) -> str:
        return "CUDA kernels" if self.device.startswith("cuda") else "CPU operators"

    def table(self, limit: int = 10) -> str:
        """A header line, then the `limit` ops with the largest share of the step, then the rest in one line."""
        gpu = self.device.startswith("cuda")
        head = (
            f"{self.kernels_per_step:g} {self.what} per {'training' if self.backward else 'inference'} step, "
            f"{self.step_us:.0f} us a step ({self.profiled_step_us:.0f} us under the profiler) on {self.device}"
        )
        cols = ["op", "calls", f"self {'GPU' if gpu else 'CPU'} us", *(["self CPU us"] * gpu), "share"]
        body = [
            [short(r.name), f"{r.calls:g}", f"{r.self_us:.1f}", *([f"{r.cpu_us:.1f}"] * gpu), f"{r.share:.1f} %"]
            for r in self.rows[:limit]
        ]
        if rest := self.rows[limit:]:
            us, share = sum(r.self_us for r in rest), sum(r.share for r in rest)
            body.append([f"({len(rest)} more)", "", f"{us:.1f}", *([""] * gpu), f"{share:.1f} %"])
        widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
        cell = lambda i, c: f"{c:{'<' if i == 0 else '>'}{widths[i]}}"  # noqa: E731
        return "\n".join([head, *("  ".join(cell(i, c) for i, c in enumerate(r)) for r in [cols, *body])])


def _engine(name: str) -> bool:
    """The autograd engine's own ranges: evaluate_function, AccumulateGrad, a node (MmBackward0, "RmsNormBackward
    (course::rms_norm)"). Their self time is the engine's; the operators they call are the work."""
    return name.startswith(("autograd::", "torch::autograd::")) or re.match(r"\w+Backward\d*( |$)", name) is not None


def _is_cpu(e) -> bool:
    return e.device_type.name == "CPU"


def _is_op(e) -> bool:
    """An operator (aten::, course::, ...) on the CPU side."""
    return "::" in e.name and not _engine(e.name) and _is_cpu(e)


def _ops_above(e):
    """The operators e runs inside, innermost first."""
    while (e := e.cpu_parent) is not None:
        if _is_op(e):
            yield e


def _moves_data(e) -> bool:
    return e.name not in NO_DATA or any(_moves_data(c) for c in e.cpu_children if _is_op(c))


def _rows(prof, steps: int, step_us: float, gpu: bool) -> list[OpRow]:
    per = {}
    for e in prof.key_averages():
        if e.key == STEP or e.device_type.name != "CPU":
            continue
        self_us = e.self_device_time_total if gpu else e.self_cpu_time_total
        if self_us > 0:  # the autograd engine's ranges (evaluate_function, MmBackward0, ...) in one row
            calls, us, cpu = per.get(name := "(autograd engine)" if _engine(e.key) else e.key, (0, 0.0, 0.0))
            per[name] = (calls + e.count, us + self_us, cpu + e.self_cpu_time_total)
    total = sum(us for _, us, _ in per.values()) / steps
    whole = max(step_us, total)  # streams or threads running at once can make the parts add up to more
    rows = [OpRow(n, c / steps, us / steps, cpu / steps, 100 * us / steps / whole) for n, (c, us, cpu) in per.items()]
    rest = "(GPU idle: waiting for the CPU)" if gpu else "(outside any op: Python, the profiler)"
    rows.append(OpRow(rest, 0, whole - total, 0.0, 100 * (whole - total) / whole))
    return sorted(rows, key=lambda r: -r.share)


def _steps(prof, gpu: bool) -> list[tuple[float, list[Launch]]]:
    """(wall time in us, launches) of each profiled step, from the STEP ranges."""
    events = prof.events()
    if gpu:  # torch lists each kernel under the innermost op that launched it: op.kernels, (name, duration)s
        owner = {}
        for e in filter(_is_op, events):
            for k in e.kernels:
                owner.setdefault((k.name, round(k.duration, 3)), []).append(e)
        bars = []
        device = (e for e in events if e.device_type.name == "CUDA" and not getattr(e, "is_user_annotation", False))
        for k in (e for e in device if e.name != STEP):  # STEP has a copy on the GPU's timeline
            ops = owner.get((k.name, round(k.time_range.end - k.time_range.start, 3))) or [None]
            op = ops.pop(0) if len(ops) > 1 else ops[0]
            chain = [op, *_ops_above(op)] if op is not None else []
            bars.append((k.name, op.name if op else "?", any("course::" in o.name for o in chain), k))
    else:
        top = (e for e in filter(_is_op, events) if next(_ops_above(e), None) is None and _moves_data(e))
        bars = [(e.name, e.name, "course::" in e.name, e) for e in top]
    out = []
    for t0, t1 in sorted((e.time_range.start, e.time_range.end) for e in events if e.name == STEP and _is_cpu(e)):
        mine = [Launch(n, op, c, e.time_range.start - t0, e.time_range.end - t0) for n, op, c, e in bars]
        out.append((t1 - t0, sorted((b for b in mine if 0 <= b.start_us <= t1 - t0), key=lambda b: b.start_us)))
    return out


def model_step_profile(
    model: nn.Module, inputs, *, steps: int = 5, device=None, backward: bool = True, warmup: int = 3, trace_path=None
) -> StepProfile:
    """torch.profiler over `steps` steps of `model` on `inputs` (a tensor or a tuple of them), after `warmup`
    steps unprofiled (first-call set-up: cuBLAS handles, the allocator, loading extensions).

    A training step (backward=True) is the forward and the backward of a fixed random gradient of the
    output: no loss and no optimizer, so every kernel listed is the model's and the weights stay as they
    were (gradients are set to None before each step, as optimizer.zero_grad() does, and after the last).
    backward=False runs the forward under torch.no_grad(), in the model's mode (model.eval() turns dropout
    off). Each step ends with a synchronize, so a step's kernels lie inside its range and its time is what it
    costs alone (training overlaps a step's CPU work with the last one's kernels, so it can be a little
    faster). device: where to run (model and inputs are moved there); None: where the model's parameters are.

    Returns a StepProfile: kernels per step (CUDA kernels, memsets and copies; CPU mode: top-level operators
    that move data), per-op rows (calls, self time and share of the step; `table()` prints them), the step's
    wall time, one step's launches for `timeline`, and `trace_path`: a Chrome trace of the profiled steps to
    open in https://ui.perfetto.dev or chrome://tracing (a new temporary file unless given)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    if device is not None:
        device = torch.device(device)
        model.to(device)
        inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)
    else:
        device = next(model.parameters(), inputs[0]).device
    gpu = device.type == "cuda"
    with torch.no_grad():
        grad = torch.randn_like(model(*inputs)) if backward else None

    def run():
        model.zero_grad(set_to_none=True)
        if backward:
            torch.autograd.backward(model(*inputs), grad)
        else:
            with torch.no_grad():
                model(*inputs)
        if gpu:
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        run()
    step_us = bench.wall(run, min_run_time=0.1).ms * 1e3
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] * gpu)], acc_events=True) as prof:
        for _ in range(steps):
            with record_function(STEP):
                run()
    model.zero_grad(set_to_none=True)
    trace_path = Path(trace_path or Path(tempfile.mkdtemp(prefix="course_profile_")) / "step_trace.json")
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    per_step = _steps(prof, gpu)
    profiled = statistics.median(us for us, _ in per_step)
    rows, kernels = _rows(prof, steps, profiled, gpu), statistics.median(len(bars) for _, bars in per_step)
    # the launches of the last step, the most warmed up
    return StepProfile(str(device), backward, kernels, step_us, profiled, rows, per_step[-1][1], trace_path)


def timeline(profile: StepProfile, ax=None):
    """One step as a Gantt chart: one horizontal bar per kernel (CPU mode: per top-level operator) from its
    start to its end, in µs from the step's start, in launch order top to bottom, over a grey band for the
    whole step. Bars back to back: the GPU is busy and the kernels decide the time. Gaps between short bars:
    the GPU waits for the CPU to launch the next one (launch-bound: fewer, fused kernels or a CUDA graph
    help). Colours are op families (matmul, norm, activation, ...) from helpers.plot's palette; a kernel of
    one of the course's ops has plot's colour for "ours" instead, so ours stand out. Returns the Figure."""
    import matplotlib.pyplot as plt

    from . import plot

    bars = profile.launches
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, max(2.5, 0.16 * len(bars) + 1.2)), layout="constrained")
    fig = ax.figure
    labels = ["course op" if b.course else family(b.op if b.op != "?" else b.name) for b in bars]
    colors = {**plot._colors(fig, [lab for lab in labels if lab != "course op"]), "course op": plot.color("ours")}
    end = max((b.end_us for b in bars), default=0.0)
    ax.axvspan(0, end, color="0.93", zorder=0)
    for i, (b, lab) in enumerate(zip(bars, labels)):
        ax.barh(
            i, b.end_us - b.start_us, left=b.start_us, color=colors[lab], label=lab if lab not in labels[:i] else None
        )
    busy = sum(b.end_us - b.start_us for b in bars)  # one stream (one thread): bars never overlap
    ax.set_yticks(range(len(bars)), [short(b.name, 40) if len(bars) <= 60 else "" for b in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, end * 1.02 or 1)
    ax.set_xlabel(f"µs from the step's start ({'GPU' if profile.device.startswith('cuda') else 'CPU'} clock)")
    ax.set_title(f"one step: {len(bars)} {profile.what}, busy {100 * busy / (end or 1):.0f} % of {end:.0f} µs")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return fig


# ------------------------------------------------------------------------------------- launch, memory or compute?

# Dense peak TFLOP/s (FP32 on the CUDA cores; BF16 and FP16 on the tensor cores, no sparsity), from NVIDIA's
# data sheets: T4 (its 16-bit figure is FP16: it has no BF16 tensor cores), A100 (SXM and PCIe alike), H100
# SXM/PCIe/NVL, H200 SXM/NVL, L4. The sheets print the 16-bit figures "with sparsity", twice these. The first
# pattern that matches torch.cuda.get_device_name wins ("NVIDIA H100 80GB HBM3" is the SXM card).
PEAKS = (  # (pattern, card, FP32, 16-bit)
    (r"\bH100\b.*PCIe", "H100 PCIe", 51.0, 756.0),
    (r"\bH100\b.*NVL", "H100 NVL", 60.0, 835.0),
    (r"\bH100\b", "H100 SXM", 67.0, 989.0),
    (r"\bH200\b.*NVL", "H200 NVL", 60.0, 835.0),
    (r"\bH200\b", "H200 SXM", 67.0, 989.0),
    (r"\bA100\b", "A100", 19.5, 312.0),
    (r"\bL4\b", "L4", 30.3, 121.0),
    (r"\bT4\b", "T4", 8.1, 65.0),
)


def peak_tflops(gpu: str, dtype: torch.dtype = torch.float32) -> tuple[float | None, str]:
    """(peak TFLOP/s of `gpu` for `dtype`, what it is), or (None, why not) for a card or dtype not in PEAKS."""
    column = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 1}.get(dtype)
    for pattern, card, *peaks in PEAKS:
        if re.search(pattern, gpu):
            if column is None:
                return None, f"no {dtype} peak for the {card} in the table"
            return peaks[column], f"the {card}'s dense {('FP32', '16-bit tensor-core')[column]} peak"
    return None, f"{gpu} is not in the table of peaks (T4, A100, H100, H200, L4): TFLOP/s given without a %"


class Verdict(enum.Enum):
    LAUNCH = "launch-bound"
    MEMORY = "memory-bound"
    COMPUTE = "compute-bound"
    NEITHER = "neither roof"


# The rules, checked in this order. A kernel can only be judged once the GPU is kept waiting for it, so the
# launch rule comes first. Copy and peak fractions are of what a copy and the datasheet reach: a good
# memory-bound kernel reaches 80-95 % of a copy, cuBLAS 60-80 % of the dense peak.
LAUNCH_RATIO = 2.0  # wall time per call >= 2x the kernel time: the GPU idles over half of each call
MEMORY_PCT = 60.0  # % of a copy of the same bytes
COMPUTE_PCT = 50.0  # % of the card's peak


def verdict(kernel_us: float, wall_us: float, pct_copy: float, pct_peak: float | None) -> tuple[Verdict, str]:
    """The verdict and the rule that decided it, in words with the numbers."""
    if wall_us >= LAUNCH_RATIO * kernel_us:
        return Verdict.LAUNCH, (
            f"wall time per call {wall_us:.1f} us is {wall_us / kernel_us:.1f}x the kernel time {kernel_us:.1f} us "
            f"(>= {LAUNCH_RATIO:g}x): the GPU waits for the CPU"
        )
    if pct_copy >= MEMORY_PCT:
        return Verdict.MEMORY, f"{pct_copy:.0f} % of a copy of the same bytes (>= {MEMORY_PCT:g} %)"
    if pct_peak is not None and pct_peak >= COMPUTE_PCT:
        return Verdict.COMPUTE, f"{pct_peak:.0f} % of the card's peak TFLOP/s (>= {COMPUTE_PCT:g} %)"
    peak = "unknown peak" if pct_peak is None else f"{pct_peak:.0f} % of peak"
    return Verdict.NEITHER, (
        f"{pct_copy:.0f} % of copy, {peak}: the kernel keeps neither the memory nor the ALUs busy "
        "(too few blocks, dependent loads, uncoalesced access)"
    )


@dataclasses.dataclass(frozen=True)
class Bound:
    gpu: str
    kernel_us: float  # its kernels' GPU time per call (bench.kernel_time, L2 flushed)
    wall_us: float  # wall time per call (bench.wall): Python, dispatch and launches included
    gbps: float
    copy_gbps: float
    pct_copy: float
    tflops: float
    peak_tflops: float | None
    pct_peak: float | None
    peak: str  # what the peak is, or why there is none
    verdict: Verdict
    rule: str

    def describe(self) -> str:
        pct = f" = {self.pct_peak:.1f} % of {self.peak}" if self.pct_peak is not None else f" ({self.peak})"
        return (
            f"{self.verdict.value}: {self.rule}. Kernel {self.kernel_us:.1f} us, wall {self.wall_us:.1f} us/call, "
            f"{self.gbps:.0f} GB/s = {self.pct_copy:.0f} % of copy, {self.tflops:.2f} TFLOP/s{pct}."
        )


def bound(fn, *, bytes_moved: int, flops: float, device=None, dtype: torch.dtype = torch.float32) -> Bound | None:
    """Launch-, memory- or compute-bound? Measures fn() (no arguments): its kernel time, its wall time per
    call, GB/s for `bytes_moved` (the fewest bytes it must move) against a copy of the same bytes
    (bench.copy_gbps), TFLOP/s for `flops` against the card's peak for `dtype` (PEAKS), and applies the rules
    above (`verdict`). Tiny sizes: the copy's event timing includes a launch (~5 us), so % of copy reads high
    there; the launch rule decides those first. GPU only: in CPU mode it prints why and returns None."""
    device = env.default_device(device)
    if device.type != "cuda":
        print("[CPU mode] skipped: profile.bound times GPU kernels (bench.wall gives the CPU time per call).")
        return None
    kernel_ms = bench.kernel_time(fn)
    if kernel_ms <= 0:
        print("profile.bound: fn launched no CUDA kernel (is its input on the GPU?)")
        return None
    wall_ms = bench.wall(fn).ms
    gpu = torch.cuda.get_device_name(device)
    copy = bench.copy_gbps(bytes_moved, device)
    gbps = bytes_moved / (kernel_ms * 1e-3) / 1e9
    tflops = flops / (kernel_ms * 1e-3) / 1e12
    peak, note = peak_tflops(gpu, dtype)
    pct_peak = 100 * tflops / peak if peak else None
    v, rule = verdict(kernel_ms * 1e3, wall_ms * 1e3, 100 * gbps / copy, pct_peak)
    return Bound(
        gpu, kernel_ms * 1e3, wall_ms * 1e3, gbps, copy, 100 * gbps / copy, tflops, peak, pct_peak, note, v, rule
    )


# ------------------------------------------------------------------------------------------------ Nsight Compute

# Nsight Compute's metric names: the kernel's duration, and DRAM throughput as % of the peak it can sustain
NCU_METRICS = ("gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed")
# Where ncu lives when it is not on PATH: the CUDA toolkit's bin/ and Nsight Compute's own installs
NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/nsight-compute*/ncu")
_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


class NcuStatus(enum.Enum):
    OK = "ok"
    NOT_PERMITTED = "counters not permitted"
    NO_KERNELS = "no kernel matched"
    FAILED = "ncu failed"
    TIMEOUT = "timed out"


NOT_PERMITTED = (
    "ncu ran, but this machine does not let it read the GPU's performance counters (ERR_NVGPUCTRPERM). The "
    "driver keeps them for administrators by default (counters can reveal what other users' kernels do), and "
    "Colab and many containers run you without that right. An admin can open them to everyone with the driver "
    "option NVreg_RestrictProfilingToAdminUsers=0 (a line 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' "
    "in /etc/modprobe.d, then reload the driver or reboot), or run ncu as root (a container: started with "
    "--cap-add=SYS_ADMIN on a host that allows it). Everything else here still works: torch.profiler's kernel "
    "times and GB/s against a copy of the same bytes (helpers.bench) need no counters."
)


def _ncu_path() -> str | None:
    home = os.environ.get("CUDA_HOME")
    places = [shutil.which("ncu"), *([f"{home}/bin/ncu"] if home else []), *NCU_PLACES]
    found = (p for place in places if place for p in sorted(glob.glob(place), reverse=True))
    return next((p for p in found if os.access(p, os.X_OK)), None)


def ncu_available() -> tuple[bool, str]:
    """(True, "<version> at <path>") where an ncu that runs is found (on PATH, then CUDA_HOME/bin and
    NCU_PLACES), else (False, why not). It does not check for a GPU or permission to read counters: only a
    profiled run can tell (ncu_memory_throughput)."""
    path = _ncu_path()
    if path is None:
        return False, "ncu (Nsight Compute) is not installed here: GB/s against a copy (helpers.bench) is the measure."
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"{path} does not run: {e}"
    if r.returncode != 0:
        return False, f"{path} --version failed (exit {r.returncode}): {(r.stdout + r.stderr).strip()[-300:]}"
    version = next((ln.strip() for ln in r.stdout.splitlines() if "version" in ln.lower()), r.stdout.strip())
    return True, f"{version} at {path}"


def _number(text: str) -> float | None:
    """ncu's values print with thousands separators ("1,024.5"); a lone comma with other than 3 digits after
    it is a decimal comma (some locales: "9,50"). None for what is not a number ("n/a")."""
    text = text.strip()
    if re.fullmatch(r"-?\d+,\d{1,2}|-?\d+,\d{4,}", text):
        text = text.replace(",", ".")
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict]:
    """ncu --csv --metrics NCU_METRICS output (any log lines around it) -> one dict per profiled launch:
    {"id", "kernel", "time_us", "dram_pct"}, in ncu's order. Columns are found by their header names."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    table = list(csv.reader(lines))
    if not table or "Metric Name" not in table[0]:
        return []
    head = table[0]
    ids, names, metric, unit, value = (
        head.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
    )
    launches: dict[str, dict] = {}
    for row in table[1:]:
        if len(row) != len(head):
            continue
        d = launches.setdefault(
            row[ids], {"id": int(row[ids]), "kernel": row[names], "time_us": None, "dram_pct": None}
        )
        if row[metric] == NCU_METRICS[0]:
            ns = _number(row[value])
            d["time_us"] = None if ns is None else ns * _TO_US.get(row[unit], 1e-3)  # no unit: ns, ncu's base
        elif row[metric] == NCU_METRICS[1]:
            d["dram_pct"] = _number(row[value])
    return list(launches.values())


def ncu_failure(text: str, returncode: int = 0) -> tuple[NcuStatus, str] | None:
    """Why an ncu run measured nothing, from its output: (status, reason), or None where nothing failed."""
    if "ERR_NVGPUCTRPERM" in text:
        return NcuStatus.NOT_PERMITTED, NOT_PERMITTED
    errors = [ln for ln in text.splitlines() if ln.startswith("==ERROR==")]
    if errors:
        return NcuStatus.FAILED, "ncu failed: " + " ".join(errors)[-800:]
    if not parse_ncu_csv(text):
        if "No kernels were profiled" in text or returncode == 0:
            return NcuStatus.NO_KERNELS, "ncu profiled no kernel: does the regex match a kernel the script launches?"
        return NcuStatus.FAILED, f"ncu exited with {returncode}; its output ends: {text[-800:]}"
    return None


def ncu_memory_throughput(
    script_or_argv, kernel_regex: str, *, launch_count: int = 4, timeout_s: float = 300, cwd=None
) -> dict | None:
    """Run a program under Nsight Compute and read each matching kernel's duration and DRAM throughput (% of
    peak). script_or_argv: a list is the command line; a path to a .py file, or a string of Python code, runs
    in this Python (cwd defaults to the course's folder, so `import helpers` works). Only kernels whose name
    matches kernel_regex are profiled, the first `launch_count` of them: ncu replays each kernel several
    times to read its counters (a second or so each), so keep both small.

    Returns None where ncu cannot run (no GPU, no ncu: the reason is printed); else a dict: "status" (an
    NcuStatus), "reason" (why it measured nothing, printed too; "" when OK), "kernels" (parse_ncu_csv's
    rows) and "command" (to run it yourself in a terminal)."""
    if not env.cuda_mode():
        print("[CPU mode] skipped: Nsight Compute profiles CUDA kernels and needs a CUDA GPU.")
        return None
    ok, why = ncu_available()
    if not ok:
        print(why)
        return None
    if isinstance(script_or_argv, (list, tuple)):
        argv = [str(a) for a in script_or_argv]
    elif str(script_or_argv).endswith(".py") and Path(script_or_argv).is_file():
        argv = [sys.executable, str(Path(script_or_argv).resolve())]
    else:
        argv = [sys.executable, "-c", str(script_or_argv)]
    cmd = [_ncu_path(), "--csv", "--metrics", ",".join(NCU_METRICS), "--target-processes", "all"]
    cmd += ["--kernel-name", f"regex:{kernel_regex}", "--launch-count", str(launch_count), *argv]
    result = {"status": NcuStatus.OK, "reason": "", "kernels": [], "command": shlex.join(cmd)}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=cwd or env.REPO_ROOT)
    except subprocess.TimeoutExpired:
        result.update(
            status=NcuStatus.TIMEOUT, reason=f"ncu took longer than {timeout_s:g} s; run the command yourself"
        )
    else:
        text = r.stdout + "\n" + r.stderr
        failed = ncu_failure(text, r.returncode)
        if failed:
            result.update(status=failed[0], reason=failed[1])
        result["kernels"] = parse_ncu_csv(text)
    if result["reason"]:
        print(result["reason"])
    return result
