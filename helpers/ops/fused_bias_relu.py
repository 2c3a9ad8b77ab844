"""Lesson 02's op, y = relu(x * scale + bias) for x of shape [..., C] and bias [C].

    y = fused_bias_relu(x, bias, 2.0)             # differentiable in x and bias; saves a bit mask for
                                                  # backward (the extension's C++ autograd Function)
    y = fused_bias_relu(x, bias, 2.0, save="output")  # ... or y, a 1-byte "mask", or x and bias ("input")
    y = fused_bias_relu_python(x, bias, 2.0)      # the bit mask, through the Python FusedBiasRelu Function
    fused_bias_relu_(x, bias, 2.0)                # in place: x becomes y (ctx.mark_dirty)
    layer = LinearReLU(256, 256)                  # relu(x @ W.T + b) with the bias add and relu fused

Also the notebook's helpers that are not the lesson's subject: what autograd keeps for backward,
GPU memory, the training run, and the timing sweep (benchmarks/fused_bias_relu.py uses it too).
"""

from __future__ import annotations

import copy
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from .. import bench
from . import extension

SAVES = ("input", "output", "mask", "bits")


def reference(x: torch.Tensor, bias: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Eager PyTorch: 3 kernels (mul, add, relu), each reading and writing a whole tensor."""
    return torch.relu(x * scale + bias)


def expected(x: torch.Tensor, bias: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """The reference computed in float64 and rounded once to x's dtype: what a kernel with float math gives."""
    return reference(x.double(), bias.double(), scale).to(x.dtype)


class FusedBiasRelu(torch.autograd.Function):
    """relu(x * scale + bias) whose backward needs, as `save` says: x and bias ("input"), the output y
    ("output": relu'(z) = 1 exactly where y > 0), a bool mask ("mask": 1 byte per element) or a bit mask
    ("bits": 1 bit per element, int32 words)."""

    @staticmethod
    def forward(ctx, x, bias, scale, save, ext):
        if save == "input":
            y = ext.forward(x, bias, scale)
            ctx.save_for_backward(x, bias)
        elif save == "mask":
            y, mask = ext.forward_mask(x, bias, scale)
            ctx.save_for_backward(mask)
        elif save == "bits":
            y, bits = ext.forward_bits(x, bias, scale)
            ctx.save_for_backward(bits)
        elif save == "output":
            y = ext.forward(x, bias, scale)
            ctx.save_for_backward(y)
        else:
            raise ValueError(f"save must be one of {SAVES}, got {save!r}")
        ctx.scale, ctx.save, ctx.ext = scale, save, ext
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        need_x, need_bias = ctx.needs_input_grad[:2]
        if ctx.save == "input":
            x, bias = ctx.saved_tensors
            grad_x, grad_bias = ctx.ext.backward(grad_y, x, bias, ctx.scale, need_bias)
        else:
            (mask_or_y,) = ctx.saved_tensors
            grad_x, grad_bias = ctx.ext.backward_from_mask(grad_y, mask_or_y, ctx.scale, need_bias)
        return (grad_x if need_x else None), grad_bias, None, None, None


class FusedBiasReluInplace(torch.autograd.Function):
    """x = relu(x * scale + bias) in place. mark_dirty tells autograd that x changed (its version goes
    up, and the graph now treats x as this Function's output); the output, all backward needs, is saved."""

    @staticmethod
    def forward(ctx, x, bias, scale, ext):
        ext.forward_(x, bias, scale)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)  # x now holds y
        ctx.scale, ctx.ext = scale, ext
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        grad_x, grad_bias = ctx.ext.backward_from_mask(grad_y, y, ctx.scale, ctx.needs_input_grad[1])
        return (grad_x if ctx.needs_input_grad[0] else None), grad_bias, None, None


def fused_bias_relu(x, bias, scale: float = 1.0, *, save: str = "bits", ext=None) -> torch.Tensor:
    """y = relu(x * scale + bias), differentiable in x and bias. save: what backward keeps (SAVES).

    save="bits" (the default) and "output" use the extension's C++ autograd Function (backward runs
    without Python: the least CPU time per call), saving the bit mask (backward reads 1 bit per element)
    or y. "input" and "mask" go through the Python FusedBiasRelu."""
    ext = ext or extension("fused_bias_relu")
    if save in ("bits", "output"):
        return ext.fused_bias_relu(x, bias, float(scale), save == "bits")
    return FusedBiasRelu.apply(x, bias, float(scale), save, ext)


def fused_bias_relu_python(x, bias, scale: float = 1.0, *, save: str = "bits", ext=None) -> torch.Tensor:
    """The same op always through the Python FusedBiasRelu Function (for comparing per-call overhead)."""
    return FusedBiasRelu.apply(x, bias, float(scale), save, ext or extension("fused_bias_relu"))


def fused_bias_relu_(x, bias, scale: float = 1.0, *, ext=None) -> torch.Tensor:
    """In place: x = relu(x * scale + bias); returns x. Differentiable like torch.relu_."""
    return FusedBiasReluInplace.apply(x, bias, float(scale), ext or extension("fused_bias_relu"))


class LinearReLU(nn.Module):
    """relu(x @ weight.T + bias), like nn.Linear followed by nn.ReLU, with the bias add and the relu
    fused into one kernel (the matrix product stays torch's). Same parameters as nn.Linear."""

    def __init__(self, in_features: int, out_features: int, *, save: str = "bits", device=None, dtype=None):
        super().__init__()
        linear = nn.Linear(in_features, out_features, device=device, dtype=dtype)  # nn.Linear's initialisation
        self.weight, self.bias, self.save = linear.weight, linear.bias, save

    @classmethod
    def from_linear(cls, linear: nn.Linear, save: str = "bits") -> LinearReLU:
        layer = cls(linear.in_features, linear.out_features, save=save, device="meta")
        layer.weight = nn.Parameter(linear.weight.detach().clone())
        layer.bias = nn.Parameter(linear.bias.detach().clone())
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_bias_relu(F.linear(x, self.weight), self.bias, 1.0, save=self.save)


def fuse(model: nn.Sequential, save: str = "bits") -> nn.Sequential:
    """A copy of `model` with every nn.Linear followed by nn.ReLU replaced by one LinearReLU (same weights)."""
    layers, mods = [], list(model)
    i = 0
    while i < len(mods):
        if isinstance(mods[i], nn.Linear) and i + 1 < len(mods) and isinstance(mods[i + 1], nn.ReLU):
            layers.append(LinearReLU.from_linear(mods[i], save=save))
            i += 2
        else:
            layers.append(copy.deepcopy(mods[i]))
            i += 1
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------------------
# Notebook helpers
# --------------------------------------------------------------------------------------------------


# The operators of the native op that each make a full pass over memory (what the CPU profiler lists).
NATIVE_PASSES = {"aten::mul", "aten::add", "aten::relu", "aten::threshold_backward", "aten::sum"}


def kernels_launched(fn, *args) -> list[str]:
    """What fn(*args) runs, one entry per pass over memory: the CUDA kernels on a GPU; on the CPU, the
    top-level native operators (ones called by another operator, like relu's clamp_min, are left out)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU], acc_events=True) as prof:
        fn(*args)
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        return [e.name.split("<")[0].split("(")[0][:48] for e in prof.events() if e.device_type.name == "CUDA"]
    top = [e for e in prof.events() if not (e.cpu_parent and e.cpu_parent.name.startswith("aten::"))]
    return [e.name for e in top if e.name in NATIVE_PASSES]


def targets(
    rows: list[dict],
    shapes=("4096x4096", "8192x8192"),
    pct: float = 90.0,
    slack: float = 0.03,
    ops=("fbr fwd", "fbr fwd+bwd"),
) -> str:
    """Lesson 02's performance targets, checked on bench rows: ours at >= `pct`% of a same-size copy, and
    no slower than torch.compile beyond `slack`, for forward and forward+backward (GPU time) at `shapes`."""
    by = {(r["op"], r["shape"], r["dtype"], r["impl"]): r for r in rows}
    out = []
    keys = {(r["op"], r["shape"], r["dtype"]) for r in rows if r["shape"] in shapes and r["op"] in ops}
    for op, shape, dtype in sorted(keys):
        ours, comp = by.get((op, shape, dtype, "ours")), by.get((op, shape, dtype, "torch.compile"))
        if not ours:
            continue
        speed = comp["ms"] / ours["ms"] if comp else float("nan")
        ok = ours["pct_copy"] >= pct and (not comp or speed >= 1 - slack)
        out.append(
            f"{'met    ' if ok else 'MISSED '} {op:<12} {shape:<10} {dtype:<9} {ours['pct_copy']:5.1f}% of copy, "
            f"{speed:4.2f}x torch.compile"
        )
    return "\n".join(out)


def saved_tensors(fn, *args) -> list[tuple[tuple, torch.dtype, int, str]]:
    """Run fn(*args) and list what autograd keeps for backward: (shape, dtype, bytes, what) per tensor,
    where `what` names it if it is one of the args or the output (both of which exist anyway)."""
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = fn(*args)
    names = {a.untyped_storage().data_ptr(): f"arg {i}" for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    names[out.untyped_storage().data_ptr()] = "the output"
    rows = []
    for t in saved:
        what = names.get(t.untyped_storage().data_ptr(), "new")
        rows.append((tuple(t.shape), t.dtype, t.numel() * t.element_size(), what))
    return rows


def graph_bytes(fn, *args, exclude=()) -> int:
    """Bytes of distinct storages autograd keeps for backward after fn(*args), leaving out `exclude`
    (parameters). Works on the CPU too: the memory a deep network holds between forward and backward."""
    keep = {}

    def pack(t):
        keep[t.untyped_storage().data_ptr()] = t
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    return sum(t.untyped_storage().nbytes() for p, t in keep.items() if p not in skip)


def cuda_memory(fn, *args) -> tuple[float, float]:
    """(MB still allocated after fn(*args) while its result is alive, MB at the peak during it), measured
    with torch.cuda.memory_allocated / max_memory_allocated from the state before the call."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    torch.cuda.synchronize()
    kept, peak = torch.cuda.memory_allocated() - before, torch.cuda.max_memory_allocated() - before
    del out
    return kept / 2**20, peak / 2**20


def stack(x, weights, biases, op):
    """A deep network's forward: x = op(x @ W, b) per layer, then x @ W_head (weights has one more
    matrix than biases). Each product keeps its input for the weight's gradient, as in training."""
    for w, b in zip(weights, biases):
        x = op(x @ w, b)
    return x @ weights[-1]


def synthetic_task(n: int = 2048, d_in: int = 32, classes: int = 10, seed: int = 0, device="cpu"):
    """Inputs and labels from a fixed random teacher network: something learnable, no download."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    teacher = torch.randn(d_in, 64, generator=g), torch.randn(64, classes, generator=g)
    y = (torch.relu(x @ teacher[0]) @ teacher[1]).argmax(1)
    return x.to(device), y.to(device)


def train(model: nn.Module, x, y, *, steps: int = 150, batch: int = 256, lr: float = 0.05, seed: int = 0):
    """SGD with momentum on cross-entropy over fixed minibatches. Returns (losses, seconds per step),
    the time taken over the steps after the first 10 (warm-up: library handles, allocator)."""
    g = torch.Generator().manual_seed(seed)
    order = [torch.randint(0, len(x), (batch,), generator=g).to(x.device) for _ in range(steps)]
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses, warmup, start = [], min(10, steps - 1), 0.0
    for i, idx in enumerate(order):
        if i == warmup:
            _sync(x)
            start = time.perf_counter()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    _sync(x)
    return [float(v) for v in losses], (time.perf_counter() - start) / (steps - warmup)


def _sync(t):
    if t.is_cuda:
        torch.cuda.synchronize()


def wall_us(fn, n: int = 300, repeat: int = 3) -> float:
    """Microseconds per call of fn() by the wall clock, GPU work included (best of `repeat` runs of n
    calls): on small tensors, the CPU time around the kernels (Python, autograd, launches), which
    GPU-event timings do not see."""
    cuda = torch.cuda.is_available()
    fn()
    best = float("inf")
    for _ in range(repeat):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if cuda:
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def _fwd_bwd(f, x, bias, g):
    def run():
        y = f(x, bias)
        torch.autograd.grad(y, (x, bias), g)

    return run


def actual_bytes(rows: int, cols: int, element_size: int, save: str = "bits") -> int:
    """Bytes forward+backward really moves: x, y, grad_y, grad_x, the bias and its gradient (in
    element_size), and what backward reads to know relu'(z): y, or 1 bit per element written and read."""
    n = rows * cols
    if save == "bits":
        return (4 * n + 3 * cols) * element_size + 2 * 4 * -(-n // 32)
    return (5 * n + 3 * cols) * element_size


def timings(shapes, dtypes, device: str, *, compiled: bool = True, progress: bool = False) -> list[dict]:
    """bench.compare rows for forward ("fbr fwd") and forward+backward ("fbr fwd+bwd") of ours, native
    PyTorch and torch.compile, per shape (rows, C) and dtype. "ours" is forward v3 and the C++ autograd
    Function saving the bit mask; "ours v2", "ours, saves y" (the C++ Function) and "ours (Python
    Function)" (bits) the alternatives. Bytes counted, the same for every row: forward reads x and writes y
    (2 M*C elements); backward reads grad_y and y, writes grad_x (3 M*C); the bias reads/writes are added.
    Saving bits moves fewer: forward also writes M*C/8 bytes, and backward reads those instead of y, so
    its forward+backward can pass 100% of a copy of the counted bytes (actual_bytes() gives the real ones).
    On a GPU, "fbr fwd+bwd" times each forward+backward step as a CUDA graph replay (bench.graphed: the
    kernels' time, for every implementation alike) and "fbr fwd+bwd eager" the same calls made one by one
    from Python, where on mid-size tensors the autograd engine's CPU time per step can exceed the GPU's."""
    ext = extension("fused_bias_relu")
    scale = 2.0
    rows = []
    for dtype in dtypes:
        for shape in shapes:
            torch._dynamo.reset()  # a fresh compile per shape: no recompile limit, no dynamic shapes
            comp = torch.compile(reference, dynamic=False) if compiled else None
            gen = torch.Generator(device=device).manual_seed(0)
            x = torch.randn(shape, device=device, dtype=dtype, generator=gen)
            b = torch.randn(shape[-1], device=device, dtype=dtype, generator=gen)
            n, c, es = x.numel(), shape[-1], x.element_size()
            labels = dict(shape="x".join(map(str, shape)), dtype=str(dtype).replace("torch.", ""), numel=n)
            fwd = {
                "ours": lambda: ext.forward(x, b, scale),
                "ours v2": lambda: ext.forward(x, b, scale, 2),
                "ours v1": lambda: ext.forward(x, b, scale, 1),
                "native": lambda: reference(x, b, scale),
            }
            if comp:
                fwd["torch.compile"] = lambda: comp(x, b, scale)
            rows += bench.compare(fwd, nbytes=(2 * n + c) * es, device=device, op="fbr fwd", **labels)
            xg, bg = x.clone().requires_grad_(), b.clone().requires_grad_()
            g = torch.randn(shape, device=device, dtype=dtype, generator=gen)
            both = {
                "ours": _fwd_bwd(lambda x, b: fused_bias_relu(x, b, scale, ext=ext), xg, bg, g),
                "ours, saves y": _fwd_bwd(lambda x, b: fused_bias_relu(x, b, scale, save="output", ext=ext), xg, bg, g),
                "ours (Python Function)": _fwd_bwd(
                    lambda x, b: fused_bias_relu_python(x, b, scale, ext=ext), xg, bg, g
                ),
                "native": _fwd_bwd(lambda x, b: reference(x, b, scale), xg, bg, g),
            }
            if comp:
                both["torch.compile"] = _fwd_bwd(lambda x, b: comp(x, b, scale), xg, bg, g)
            nb = (5 * n + 3 * c) * es
            if device != "cpu":  # the calls one by one from Python, as eager training makes them (before
                # any graph is captured: a graph keeps its own memory pool for as long as it lives)
                rows += bench.compare(both, nbytes=nb, device=device, op="fbr fwd+bwd eager", **labels)
            rows += bench.compare(both, nbytes=nb, device=device, op="fbr fwd+bwd", graph=True, **labels)
            if progress:
                print(f"  {labels['shape']:>12} {labels['dtype']}", flush=True)
    return rows
