"""Lesson 02's op, y = relu(x * scale + bias) for x of shape [..., C] and bias [C].

    y = fused_bias_relu(x, bias, 2.0)             # differentiable in x and bias; saves a bit mask for
                                                  # backward (the extension's C++ autograd Function)
    y = fused_bias_relu(x, bias, 2.0, save="output")  # ... or y, a 1-byte "mask", or x and bias ("input")
    y = fused_bias_relu_python(x, bias, 2.0)      # the bit mask, through the Python FusedBiasRelu Function
    fused_bias_relu_(x, bias, 2.0)                # in place: x becomes y (ctx.mark_dirty)
    layer = LinearReLU(256, 256)                  # relu(x @ W.T + b) with the bias add and relu fused

Also the notebook's helpers that are not the lesson's subject: what autograd keeps for backward,
GPU memory and the training run. The timing sweep is benchmarks/fused_bias_relu.py (the notebook uses it).
"""

from __future__ import annotations

import copy
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

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
