"""Lesson 02's op, y = relu(x * scale + bias) for x of shape [..., C] and bias [C], and (lesson 04) the
real PyTorch ops torch.ops.course.fused_bias_relu and friends (kernels/fused_bias_relu/fused_bias_relu.cpp defines them).

    y = fused_bias_relu(x, bias, 2.0)             # torch.ops.course.fused_bias_relu: differentiable in x and
                                                  # bias, autograd in C++ saving a bit mask; torch.compile-able
    y = fused_bias_relu(x, bias, 2.0, save="output")  # ... or y, a 1-byte "mask", or x and bias ("input")
    y = fused_bias_relu_python(x, bias, 2.0)      # the bit mask, through the Python FusedBiasRelu Function
    fused_bias_relu_(x, bias, 2.0)                # in place: x becomes y (torch.ops.course.fused_bias_relu_)
    layer = LinearReLU(256, 256)                  # relu(x @ W.T + b) with the bias add and relu fused

Mixed floating dtypes behave as in native torch.relu(x * scale + bias): bfloat16 x with a float32 bias gives
float32 (type promotion); the in-place op keeps x's dtype. Under torch.autocast the op, like native mul, add
and relu, has no autocast rule: it runs in its inputs' dtypes.

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

from . import call, extension, once

SAVES = ("input", "output", "mask", "bits")
FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_C10_NAMES = {  # c10::ScalarType as the kernels' messages print it
    torch.float32: "Float",
    torch.float64: "Double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.int64: "Long",
    torch.int32: "Int",
    torch.int16: "Short",
    torch.int8: "Char",
    torch.uint8: "Byte",
    torch.bool: "Bool",
}


def _c10_name(dtype: torch.dtype) -> str:
    return _C10_NAMES.get(dtype, str(dtype))


def native_dtype(x: torch.Tensor, bias: torch.Tensor) -> torch.dtype:
    """The dtype of native relu(x * scale + bias): x's, or the wider of two floating dtypes (type promotion).
    Anything else is left to the kernels' checks, which refuse it naming the argument."""
    if x.dtype != bias.dtype and x.dtype in FLOATING and bias.dtype in FLOATING:
        return torch.promote_types(x.dtype, bias.dtype)
    return x.dtype


@once
def register() -> None:
    """Load the op (its C++ side defines the four ops below with CPU, CUDA and Autograd kernels, and the
    in-place op's version bump) and register their fake kernels: what torch.compile runs instead of ours
    while tracing, to learn each output's shape, dtype and strides without computing anything.

    course::fused_bias_relu(x, bias, scale) -> y
    course::fused_bias_relu_bits(x, bias, scale) -> (y, bits)      bits: int32 [ceil(x.numel() / 32)]
    course::fused_bias_relu_backward_bits(grad_y, bits, scale, need_bias_grad) -> (grad_x, grad_bias)
    course::fused_bias_relu_(x, bias, scale) -> ()                  x = y, in place
    """
    extension("fused_bias_relu")

    def check_bias(x, bias, *, promotes=False):  # the kernels' checks (kernels/common/checks.h), in their words
        torch._check_type(
            x.dtype in FLOATING, lambda: f"x must be float32, float64, float16 or bfloat16, got {_c10_name(x.dtype)}"
        )
        torch._check_value(x.dim() >= 1, lambda: "x must have at least one dimension, got a 0-d tensor")
        torch._check(
            bias.device == x.device, lambda: f"bias must be on the same device as x ({x.device}), got {bias.device}"
        )
        torch._check_type(
            bias.dtype == x.dtype or (promotes and bias.dtype in FLOATING),
            lambda: f"bias must have the dtype of x ({_c10_name(x.dtype)}), got {_c10_name(bias.dtype)}",
        )
        torch._check_value(
            bias.dim() == 1 and bias.shape[0] == x.shape[-1],
            lambda: f"bias must have shape [C] = [{x.shape[-1]}] to match x's last dimension, got {list(bias.shape)}",
        )

    @torch.library.register_fake("course::fused_bias_relu")
    def _(x, bias, scale):
        check_bias(x, bias, promotes=True)
        return x.new_empty(x.shape, dtype=native_dtype(x, bias))  # contiguous, like the kernel's output

    @torch.library.register_fake("course::fused_bias_relu_bits")
    def _(x, bias, scale):
        check_bias(x, bias)
        return x.new_empty(x.shape), x.new_empty(((x.numel() + 31) // 32,), dtype=torch.int32)

    @torch.library.register_fake("course::fused_bias_relu_backward_bits")
    def _(grad_y, bits, scale, need_bias_grad):
        return grad_y.new_empty(grad_y.shape), grad_y.new_empty((grad_y.shape[-1] if need_bias_grad else 0,))

    @torch.library.register_fake("course::fused_bias_relu_")
    def _(x, bias, scale):
        check_bias(x, bias, promotes=True)  # bias is rounded to x's dtype
        return None


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


def _promoted(x, bias):
    """x and bias in native_dtype(x, bias), for the Python Function's kernels (they take one dtype). Anything
    but two tensors goes as it is, for the kernels to refuse naming the argument."""
    if not (isinstance(x, torch.Tensor) and isinstance(bias, torch.Tensor)):
        return x, bias
    dtype = native_dtype(x, bias)
    return x.to(dtype), bias.to(dtype)


def fused_bias_relu(x, bias, scale: float = 1.0, *, save: str = "bits", ext=None) -> torch.Tensor:
    """y = relu(x * scale + bias), differentiable in x and bias. save: what backward keeps (SAVES).

    save="bits" (the default) is torch.ops.course.fused_bias_relu: autograd in C++ (forward and backward run
    without Python) saving the bit mask (backward reads 1 bit per element), and it works under torch.compile.
    "output" is the same C++ Function saving y; "input" and "mask" go through the Python FusedBiasRelu. `ext`
    (a module from loader.load) runs that module's kernels (its `fused_bias_relu` binding calls the registered
    op). Mixed floating dtypes give native's dtype."""
    if save == "bits":
        if ext is None:
            register()
        return call("fused_bias_relu", x, bias, float(scale), ext=ext)
    ext = ext or extension("fused_bias_relu")
    if save == "output":
        return ext.fused_bias_relu(x, bias, float(scale), False)
    if save not in SAVES:
        raise ValueError(f"save must be one of {SAVES}, got {save!r}")
    return FusedBiasRelu.apply(*_promoted(x, bias), float(scale), save, ext)


def fused_bias_relu_python(x, bias, scale: float = 1.0, *, save: str = "bits", ext=None) -> torch.Tensor:
    """The same op always through the Python FusedBiasRelu Function (to compare with the C++ Function)."""
    return FusedBiasRelu.apply(*_promoted(x, bias), float(scale), save, ext or extension("fused_bias_relu"))


def fused_bias_relu_(x, bias, scale: float = 1.0, *, ext=None) -> torch.Tensor:
    """In place: x = relu(x * scale + bias); returns x. Differentiable like torch.relu_: the registered
    torch.ops.course.fused_bias_relu_, whose Autograd kernel is a C++ Function that marks x dirty. `ext`
    (a module from loader.load) goes through lesson 02's Python FusedBiasReluInplace with its kernels."""
    if ext is not None:
        return FusedBiasReluInplace.apply(x, bias, float(scale), ext)
    register()
    torch.ops.course.fused_bias_relu_(x, bias, float(scale))
    return x


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
