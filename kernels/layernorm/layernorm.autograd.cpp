// kernels/layernorm/layernorm.autograd.cpp: course::layer_norm's Autograd and AutocastCUDA kernels (lesson
// 04), beside the glue in layernorm.cpp.
//
//   LayerNormBackward           the backward node, written by hand (kernels/common/library.h says why)
//   layer_norm_autograd         the Autograd kernel: course::layer_norm_forward, then the node
//   layer_norm_autocast_cuda    under torch.autocast("cuda"): float32, as native layer_norm
//   layer_norm(...)             what lesson 03's binding `ext.layer_norm` calls: the registered op
//
// They call the registered ops through the dispatcher, so this file needs nothing of layernorm.cpp but the
// ops' names and signatures; it is a file of its own for the build: the loader compiles an op's files in
// parallel, and this one does not include pybind11 (layernorm.cpp's first build on 2 cores, with the
// precompiled headers: 5.2 s, 6.6 s with this file's code in it).
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/checks.h"
#include "common/library.h"
#include "common/norm_ops.h"

namespace {

using norm_ops::defined;
using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The signatures the dispatcher calls the ops with (SymInt[]: under torch.compile with dynamic shapes the
// sizes may be symbols; layernorm.cpp's CPU and CUDA kernels only ever see numbers).
using LayerNormSig = at::Tensor(const at::Tensor&, c10::SymIntArrayRef, const std::optional<at::Tensor>&,
                                const std::optional<at::Tensor>&, double);
using ForwardSig = ForwardResult(const at::Tensor&, c10::SymIntArrayRef, const std::optional<at::Tensor>&,
                                 const std::optional<at::Tensor>&, double);
using BackwardSig = ForwardResult(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                                  const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                  const std::optional<at::Tensor>&, std::array<bool, 3>);

// The backward node autograd runs for course::layer_norm, written by hand (kernels/common/library.h says
// why): its edges lead to x, weight and bias (an invalid edge for None or for a tensor that needs no
// gradient); it holds what backward needs as SavedVariables, which check at unpack time that nothing wrote to
// them in place since.
struct LayerNormBackward : torch::autograd::Node {
  torch::autograd::SavedVariable x, weight, bias, mean, rstd;
  int64_t dims = 0;

  std::string name() const override { return "LayerNormBackward (course::layer_norm)"; }
  void release_variables() override {
    for (auto* v : {&x, &weight, &bias, &mean, &rstd}) v->reset_data();
  }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    static const auto backward_op = op<BackwardSig>("layer_norm_backward");
    // edge i wants a gradient: false for None (an invalid edge) and for a tensor that needs none
    const bool want_x = should_compute_output(0), want_w = should_compute_output(1),
               want_b = should_compute_output(2);
    if (!grads[0].defined() || !(want_x || want_w || want_b))
      return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto x_ = x.unpack(), w_ = weight.unpack(), b_ = bias.unpack();
    const auto normalized_shape = x_.sym_sizes().slice(x_.dim() - dims);
    auto [grad_x, grad_w, grad_b] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      return backward_op.call(grads[0], x_, normalized_shape, mean.unpack(), rstd.unpack(),
                              w_.defined() ? std::optional<at::Tensor>(w_) : std::nullopt,
                              b_.defined() ? std::optional<at::Tensor>(b_) : std::nullopt,
                              {want_x, want_w, want_b});
    }();
    return once_differentiable(
        "layer_norm",
        {want_x ? grad_x : at::Tensor(), want_w ? grad_w : at::Tensor(), want_b ? grad_b : at::Tensor()},
        grads);
  }
};

// The devices are checked here, before the dispatcher picks the next kernel: it picks by every tensor's
// device, so a CPU x with a "meta" weight would go to the meta (fake) kernel, not to ours that says what
// is wrong.
at::Tensor layer_norm_autograd(const at::Tensor& x, c10::SymIntArrayRef normalized_shape,
                               const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                               double eps) {
  if (defined(weight)) check_same_device(*weight, "weight", x, "x");
  if (defined(bias)) check_same_device(*bias, "bias", x, "x");
  static const auto forward_op = op<ForwardSig>("layer_norm_forward");
  check_no_forward_ad("layer_norm", x, weight, bias);
  auto [y, mean, rstd] = [&] {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return forward_op.call(x, normalized_shape, weight, bias, eps);
  }();
  if (torch::autograd::compute_requires_grad(x, weight, bias)) {
    const auto node =
        std::shared_ptr<LayerNormBackward>(new LayerNormBackward(), torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(x, weight, bias));
    node->x = torch::autograd::SavedVariable(x, false);
    if (defined(weight)) node->weight = torch::autograd::SavedVariable(*weight, false);
    if (defined(bias)) node->bias = torch::autograd::SavedVariable(*bias, false);
    node->mean = torch::autograd::SavedVariable(mean, false);
    node->rstd = torch::autograd::SavedVariable(rstd, false);
    node->dims = int64_t(normalized_shape.size());
    torch::autograd::set_history(y, node);
  }
  return y;
}

const auto& layer_norm_op() {
  static const auto handle = op<LayerNormSig>("layer_norm");
  return handle;
}

// Autocast on CUDA: native layer_norm's rule (float32), applied as ATen's own autocast wrappers do: each
// floating CUDA tensor that is not float64 cast to float32 (cached_cast keeps a cast of a parameter for
// the rest of the autocast region), then the op called again with autocast off.
at::Tensor layer_norm_autocast_cuda(const at::Tensor& x, c10::SymIntArrayRef normalized_shape,
                                    const std::optional<at::Tensor>& weight,
                                    const std::optional<at::Tensor>& bias, double eps) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  const auto cuda = c10::DeviceType::CUDA;
  return layer_norm_op().call(at::autocast::cached_cast(at::kFloat, x, cuda), normalized_shape,
                              at::autocast::cached_cast(at::kFloat, weight, cuda),
                              at::autocast::cached_cast(at::kFloat, bias, cuda), eps);
}

}  // namespace

// The registered op called from C++, for lessons that hold the pybind11 module: the same differentiable op
// as torch.ops.course.layer_norm.
at::Tensor layer_norm(const at::Tensor& x, std::vector<int64_t> normalized_shape,
                      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                      double eps) {
  return layer_norm_op().call(x, c10::fromIntArrayRefSlow(normalized_shape), weight, bias, eps);
}

TORCH_LIBRARY_IMPL(course, Autograd, m) { m.impl("layer_norm", &layer_norm_autograd); }
TORCH_LIBRARY_IMPL(course, AutocastCUDA, m) { m.impl("layer_norm", &layer_norm_autocast_cuda); }
