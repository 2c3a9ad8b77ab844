// kernels/fused_bias_relu/fused_bias_relu.autograd.cpp: course::fused_bias_relu's Autograd kernels (lesson
// 02's C++ autograd Functions; lesson 04 registers them), beside the glue in fused_bias_relu.cpp.
//
//   FusedBiasReluFunction         y = relu(x * scale + bias); saves the bit mask (or y) for backward
//   FusedBiasReluInplaceFunction  x = relu(x * scale + bias) in place (mark_dirty); saves the output
//   fused_bias_relu(x, bias, scale, save_bits)   what lesson 02's binding `ext.fused_bias_relu` calls
//
// They call the registered ops (course::fused_bias_relu, _bits, _backward_bits, fused_bias_relu_) through
// the dispatcher, below the Autograd key: under torch.compile the tensors are fake, and the dispatcher sends
// them to the fake kernels (helpers/ops/fused_bias_relu.py) instead of ours. So this file needs nothing of
// fused_bias_relu.cpp but the ops' names and signatures, and it is a file of its own for the build: the
// loader compiles an op's files in parallel, and this one does not include pybind11 (the glue's first build
// on 2 cores, with the precompiled headers: 5.0 s split in two, 8.3 s as one file).
#include <torch/autograd.h>

#include <tuple>

#include "common/checks.h"
#include "common/library.h"

namespace {

// The ops as typed handles, looked up once (the signatures of fused_bias_relu.cpp's registered kernels).
using Pair = std::tuple<at::Tensor, at::Tensor>;
const auto& forward_op() {
  static const auto handle = op<at::Tensor(const at::Tensor&, const at::Tensor&, double)>("fused_bias_relu");
  return handle;
}
const auto& bits_op() {
  static const auto handle = op<Pair(const at::Tensor&, const at::Tensor&, double)>("fused_bias_relu_bits");
  return handle;
}
const auto& backward_bits_op() {
  static const auto handle =
      op<Pair(const at::Tensor&, const at::Tensor&, double, bool)>("fused_bias_relu_backward_bits");
  return handle;
}
const auto& inplace_op() {
  static const auto handle = op<void(at::Tensor&, const at::Tensor&, double)>("fused_bias_relu_");
  return handle;
}

// What both Functions' backward runs: grad_x and grad_bias from grad_y and what forward saved (the bits,
// or y), one kernel, through the dispatcher below the Autograd key.
std::tuple<at::Tensor, at::Tensor> grads_from(const at::Tensor& grad_y, const at::Tensor& saved, double scale,
                                              bool need_bias_grad) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return backward_bits_op().call(grad_y, saved, scale, need_bias_grad);
}

}  // namespace

// The same op as a C++ autograd Function: the graph node is C++, so forward and backward run without Python
// (libtorch and other C++ callers can use it; lesson 02 measures what it costs per call). By default it
// saves the bit mask of forward_bits: backward then reads 1 bit per element instead of y's 2 or 4 bytes
// (a third less memory traffic for a bfloat16 backward), for numel / 8 bytes kept between the passes.
// With save_bits=false it saves y, like native relu: no extra memory when something keeps y anyway.
// forward and backward call the registered ops (course::fused_bias_relu_bits or course::fused_bias_relu,
// and course::fused_bias_relu_backward_bits) through the dispatcher, below the Autograd key.
class FusedBiasReluFunction : public torch::autograd::Function<FusedBiasReluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& bias, double scale, bool save_bits) {
    ctx->saved_data["scale"] = scale;
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    if (!save_bits) {
      at::Tensor y = forward_op().call(x, bias, scale);
      ctx->save_for_backward({y});
      return y;
    }
    auto [y, bits] = bits_op().call(x, bias, scale);
    ctx->save_for_backward({bits});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor saved = ctx->get_saved_variables()[0];  // the bits or y: backward_bits takes both
    const bool need_x = ctx->needs_input_grad(0), need_bias = ctx->needs_input_grad(1);
    auto [grad_x, grad_bias] =
        grads_from(grad_outputs[0], saved, ctx->saved_data["scale"].toDouble(), need_bias);
    return once_differentiable(  // none for the numbers
        "fused_bias_relu", {need_x ? grad_x : at::Tensor(), need_bias ? grad_bias : at::Tensor(), {}, {}},
        grad_outputs);
  }
};

// x = relu(x * scale + bias) in place as a C++ autograd Function: mark_dirty tells autograd that x
// changed (its version goes up, a leaf that requires grad is refused, and x now comes out of this node);
// backward keeps the output, saved after the write, since the old x is gone.
class FusedBiasReluInplaceFunction : public torch::autograd::Function<FusedBiasReluInplaceFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, const at::Tensor& bias,
                            double scale) {
    ctx->saved_data["scale"] = scale;
    {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;  // mark_dirty bumps the version
      inplace_op().call(x, bias, scale);
    }
    ctx->mark_dirty({x});
    ctx->save_for_backward({x});  // x now holds y
    return x;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor y = ctx->get_saved_variables()[0];
    const bool need_x = ctx->needs_input_grad(0), need_bias = ctx->needs_input_grad(1);
    auto [grad_x, grad_bias] = grads_from(grad_outputs[0], y, ctx->saved_data["scale"].toDouble(), need_bias);
    return once_differentiable("fused_bias_relu_",
                               {need_x ? grad_x : at::Tensor(), need_bias ? grad_bias : at::Tensor(), {}},
                               grad_outputs);
  }
};

namespace {

bool recording(const at::Tensor& x, const at::Tensor& bias) {
  return at::GradMode::is_enabled() && (x.requires_grad() || bias.requires_grad());
}

// The differentiable op. With nothing to record (no grad needed, or torch.no_grad) the forward alone:
// no mask to compute and no graph node. Mixed floating dtypes are converted here, by differentiable
// .to() calls, so the gradients come back in each argument's own dtype.
// The devices are checked first, before the dispatcher picks the next kernel: it picks by every tensor's
// device, so a bias on "meta" beside a CPU x would go to the meta (fake) kernel, not to ours that says
// what is wrong.
void check_devices(const at::Tensor& x, const at::Tensor& bias) {
  if (x.defined() && bias.defined()) check_same_device(bias, "bias", x, "x");
}

at::Tensor differentiable(const at::Tensor& x, const at::Tensor& bias, double scale, bool save_bits) {
  check_devices(x, bias);
  if (!recording(x, bias)) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return forward_op().call(x, bias, scale);
  }
  if (floating_pair(x, bias))
    return FusedBiasReluFunction::apply(x.to(promoted(x, bias)), bias.to(promoted(x, bias)), scale,
                                        save_bits);
  return FusedBiasReluFunction::apply(x, bias, scale, save_bits);
}

at::Tensor fused_bias_relu_autograd(const at::Tensor& x, const at::Tensor& bias, double scale) {
  return differentiable(x, bias, scale, /*save_bits=*/true);
}

void fused_bias_relu_inplace_autograd(at::Tensor& x, const at::Tensor& bias, double scale) {
  check_devices(x, bias);
  if (!recording(x, bias)) {  // ADInplaceOrView (below) bumps the version
    const at::AutoDispatchBelowAutograd below_autograd;
    inplace_op().call(x, bias, scale);
    return;
  }
  // Refused before x is touched (autograd's own check, after the write, would leave x changed).
  TORCH_CHECK(!x.is_leaf() || !x.requires_grad(),
              "a leaf Variable that requires grad is being used in an in-place operation: "
              "course::fused_bias_relu_ would overwrite x, whose value its gradient is for");
  FusedBiasReluInplaceFunction::apply(x, floating_pair(x, bias) ? bias.to(x.scalar_type()) : bias, scale);
}

// Every in-place op bumps its argument's version counter (so that a backward that saved the old value
// fails loudly): this is where PyTorch's own in-place ops do it.
void fused_bias_relu_inplace_or_view(at::Tensor& x, const at::Tensor& bias, double scale) {
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    inplace_op().call(x, bias, scale);
  }
  torch::autograd::impl::bump_version(x);
}

}  // namespace

// Lesson 02's binding: save_bits=true is the registered op course::fused_bias_relu (whose Autograd kernel
// is the Function above), save_bits=false the same Function saving y.
at::Tensor fused_bias_relu(const at::Tensor& x, const at::Tensor& bias, double scale, bool save_bits) {
  if (save_bits) return forward_op().call(x, bias, scale);
  return differentiable(x, bias, scale, false);
}

TORCH_LIBRARY_IMPL(course, Autograd, m) {
  m.impl("fused_bias_relu", &fused_bias_relu_autograd);
  m.impl("fused_bias_relu_", &fused_bias_relu_inplace_autograd);
}
TORCH_LIBRARY_IMPL(course, ADInplaceOrView, m) {
  m.impl("fused_bias_relu_", &fused_bias_relu_inplace_or_view);
}
