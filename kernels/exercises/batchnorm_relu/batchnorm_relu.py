"""course::batchnorm_relu's Python side (lesson 09's practice set: the answer). batchnorm_relu.cpp registers the
ops' schemas, their CPU and CUDA kernels and the version bump of the running statistics; this file adds what
torch.compile and autograd need, the public function, and the inference fold:

    register(lib)                 the fake kernels and the autograd formula, made with lib=... (a
                                  torch.library.Library fragment of the namespace `course`): they last as long as lib
    batchnorm_relu(x, weight, bias, running_mean, running_var, momentum=0.1, eps=1e-5) -> y
                                  nn.BatchNorm2d in training followed by ReLU, in one op; the running statistics
                                  are updated in place
    fold_conv_bn(conv, bn)        a new nn.Conv2d computing bn(conv(x)) in eval mode: the BatchNorm folded into
                                  the convolution's weight and bias

The forward op writes two of its inputs (running_mean, running_var: `Tensor(a!)` in its schema). That changes two
things. torch.library.register_autograd refuses such an op ("non-functional operator"), so register() installs the
same autograd Function that register_autograd builds (and that torch.library.custom_op(..., mutates_args=...)
installs for an op of its own) directly as the op's Autograd kernel. And under torch.compile the op is
functionalized (auto_functionalize): the graph calls it on copies of the running statistics and copies the results
back, so the fake kernel only describes the three outputs.
"""

import copy

import torch


def _layout(x: torch.Tensor) -> torch.memory_format:
    """The kernels' layout: channels-last where x is laid out so and is not also contiguous, else NCHW."""
    if not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


def _check(x: torch.Tensor, weight: torch.Tensor) -> None:
    # The kernel's shape checks, for fake tensors: torch.compile then reports a bad shape as the kernel would.
    torch._check(x.dim() == 4, lambda: f"x must be 4-D [N, C, H, W], got shape {list(x.shape)}")
    torch._check(
        tuple(weight.shape) == (x.shape[1],), lambda: f"weight must have shape [{x.shape[1]}], got {list(weight.shape)}"
    )


def batchnorm_relu_fake(x, weight, bias, running_mean, running_var, momentum, eps):
    """What course::batchnorm_relu returns: y of x's shape and dtype in the kernels' layout, and mean and rstd [C]
    in the parameters' dtype. The running statistics it writes are in the schema; the fake computes nothing."""
    _check(x, weight)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=_layout(x))
    return y, weight.new_empty(x.shape[1]), weight.new_empty(x.shape[1])


def batchnorm_relu_backward_fake(grad_y, y, x, weight, mean, rstd):
    """What course::batchnorm_relu_backward returns: grad_x like x (in the kernels' layout), grad_weight and
    grad_bias like weight."""
    _check(x, weight)
    torch._check(grad_y.shape == x.shape, lambda: f"grad_y must have shape {list(x.shape)}, got {list(grad_y.shape)}")
    grad_x = torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=_layout(x))
    return grad_x, weight.new_empty(weight.shape), weight.new_empty(weight.shape)


def setup_context(ctx, inputs, output):
    x, weight, bias, running_mean, running_var, momentum, eps = inputs
    y, mean, rstd = output
    # TODO(exercise): your code here (the solution is 2 lines).
    raise NotImplementedError("exercise: your code here")


def backward(ctx, grad_y, grad_mean, grad_rstd):
    # TODO(exercise): your code here (the solution is 3 lines).
    raise NotImplementedError("exercise: your code here")


def batchnorm_relu(x, weight, bias, running_mean, running_var, momentum: float = 0.1, eps: float = 1e-5):
    """relu(batch_norm(x, running_mean, running_var, weight, bias, training=True, momentum, eps)) for x [N, C, H,
    W] (NCHW or channels-last; y comes back in x's layout). Updates running_mean and running_var in place, with the
    unbiased batch variance, as nn.BatchNorm2d does in training. Differentiable in x, weight and bias."""
    y, _, _ = torch.ops.course.batchnorm_relu(x, weight, bias, running_mean, running_var, float(momentum), float(eps))
    return y


def fold_conv_bn(conv: torch.nn.Conv2d, bn: torch.nn.BatchNorm2d) -> torch.nn.Conv2d:
    """A new nn.Conv2d that computes bn(conv(x)) with bn in eval mode: bn(z) = (z - running_mean) * s + beta per
    output channel, s = gamma / sqrt(running_var + eps), so the convolution's weight is scaled by s along its
    output channels and its bias becomes (bias - running_mean) * s + beta. conv and bn are left as they were."""
    if not isinstance(conv, torch.nn.Conv2d) or not isinstance(bn, torch.nn.BatchNorm2d):
        raise TypeError(
            f"fold_conv_bn takes an nn.Conv2d and an nn.BatchNorm2d, got {type(conv).__name__}, {type(bn).__name__}"
        )
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError("bn has no running statistics (track_running_stats=False): there is nothing to fold")
    if bn.num_features != conv.out_channels:
        raise ValueError(f"bn has {bn.num_features} features, conv {conv.out_channels} output channels")
    fused = copy.deepcopy(conv)
    with torch.no_grad():
        w, b = conv.weight, conv.bias
        mean, var = bn.running_mean.to(w.dtype), bn.running_var.to(w.dtype)
        gamma = bn.weight.to(w.dtype) if bn.weight is not None else torch.ones_like(mean)
        beta = bn.bias.to(w.dtype) if bn.bias is not None else torch.zeros_like(mean)
        b = b if b is not None else torch.zeros_like(mean)
        new_w, new_b = w, b
        # TODO(exercise): your code here (the solution is 3 lines).
        raise NotImplementedError("exercise: your code here")
        fused.weight = torch.nn.Parameter(new_w.to(w.dtype), requires_grad=conv.weight.requires_grad)
        fused.bias = torch.nn.Parameter(new_b.to(w.dtype), requires_grad=conv.weight.requires_grad)
    return fused


def _register_autograd(lib: torch.library.Library, name: str, backward_fn, setup_context_fn) -> None:
    """torch.library.register_autograd(name, backward_fn, setup_context=setup_context_fn, lib=lib) for an op that
    writes some of its inputs, which register_autograd refuses: the same autograd Function it would build, set as
    the op's Autograd kernel (what torch.library.custom_op does for an op with mutates_args)."""
    from torch._library import autograd as library_autograd

    op = getattr(torch.ops.course, name.split("::")[1]).default
    impl = library_autograd.make_autograd_impl(op, library_autograd.Info(backward_fn, setup_context_fn))
    lib.impl(name.split("::")[1], impl, "Autograd", with_keyset=True)


def register(lib: torch.library.Library) -> None:
    torch.library.register_fake("course::batchnorm_relu", batchnorm_relu_fake, lib=lib)
    torch.library.register_fake("course::batchnorm_relu_backward", batchnorm_relu_backward_fake, lib=lib)
    _register_autograd(lib, "course::batchnorm_relu", backward, setup_context)
