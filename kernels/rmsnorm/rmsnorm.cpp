// kernels/rmsnorm/rmsnorm.cpp: the PyTorch side of RMSNorm (lesson 05): the lesson's functions and the real
// PyTorch op, with native torch.nn.functional.rms_norm's arguments.
//
//   forward(x, weight, eps=None, version=2) -> [y, rstd]                      over the last dimension
//   backward(grad_y, x, rstd, weight, version=2) -> [grad_x, grad_weight]
//   rms_norm(x, normalized_shape, weight=None, eps=None) -> y   torch.ops.course.rms_norm, differentiable
//
// x is [..., *normalized_shape] (N the product of normalized_shape: x is an [M, N] matrix seen row by row);
// weight is normalized_shape with x's dtype, float32 beside a float16/bfloat16 x (as native allows), or None.
// eps None is native's: the machine epsilon of the math type (float32's, float64's for a float64 x). rstd
// has x's leading shape and is float32 (float64 for float64 x). The CPU code is kernels/common/rmsnorm_cpu.h
// (the same for every version); the CUDA launchers are kernels/rmsnorm/rmsnorm.cu's.
#include <ATen/autocast_mode.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <array>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/library.h"
#include "common/norm_ops.h"
#include "common/rmsnorm_cpu.h"

#ifdef WITH_CUDA
#include "rmsnorm.h"
#endif

using namespace norm_ops;

namespace {

std::tuple<at::Tensor, at::Tensor> forward_impl(const at::Tensor& x_in, at::IntArrayRef normalized_shape,
                                                const std::optional<at::Tensor>& weight,
                                                std::optional<double> eps_in, int64_t version) {
  const int64_t N = check_x(x_in, normalized_shape);
  const at::ScalarType param_type = check_params(x_in, normalized_shape, {{&weight, "weight"}});
  const double eps = default_eps(x_in, eps_in);
  check_eps(eps);
  const at::Tensor x = x_in.contiguous();
  const auto leading = x.sizes().slice(0, x.dim() - normalized_shape.size());
  at::Tensor y = at::empty(x.sizes(), x.options());
  at::Tensor rstd = at::empty(leading, x.options().dtype(acc_dtype(x)));
  const int64_t M = x.numel() / N;
  if (M == 0) return {y, rstd};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (x.is_cpu()) {
      const auto run = [&](auto param_zero) {
        using P = decltype(param_zero);
        at::Tensor wk;
        std::vector<P> wf;
        norm_cpu::forward<norm_cpu::Norm::kRms>(
            x.data_ptr<scalar_t>(), static_cast<const scalar_t*>(nullptr), cpu_param<P>(weight, N, 1, wk, wf),
            static_cast<const P*>(nullptr), y.data_ptr<scalar_t>(), static_cast<scalar_t*>(nullptr),
            static_cast<acc_t*>(nullptr), rstd.data_ptr<acc_t>(), M, N, static_cast<acc_t>(eps));
      };
      norm_ops::with_param_type<scalar_t>(param_type, run);
      return;
    }
#ifdef WITH_CUDA
    using cuda_t = typename CudaType<scalar_t>::type;
    const OnDevice on(x);
    const at::Tensor w = cuda_param(weight, x, N, 1);
    const auto launch = version == 1 ? rmsnorm_forward_v1<cuda_t> : rmsnorm_forward_v2<cuda_t>;
    launch(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(w), cuda_ptr<scalar_t>(y), rstd.data_ptr<acc_t>(), M,
           int(N), static_cast<acc_t>(eps), on.stream);
#endif
  });
  return {y, rstd};
}

// output_mask: which of grad_x, grad_weight to return; the other is an empty [0] tensor (an op returns
// tensors, never None). grad_weight has shape normalized_shape and weight's dtype (x's for None).
std::tuple<at::Tensor, at::Tensor> backward_impl(const at::Tensor& grad_y_in, const at::Tensor& x_in,
                                                 at::IntArrayRef normalized_shape, const at::Tensor& rstd_in,
                                                 const std::optional<at::Tensor>& weight,
                                                 std::array<bool, 2> output_mask, int64_t version) {
  const int64_t N = check_x(x_in, normalized_shape);
  const at::ScalarType param_type = check_params(x_in, normalized_shape, {{&weight, "weight"}});
  check_grad(grad_y_in, "grad_y", x_in, "x");
  const auto leading = x_in.sizes().slice(0, x_in.dim() - normalized_shape.size());
  check_stats(rstd_in, "rstd", x_in, leading);
  const at::Tensor x = x_in.contiguous(), grad_y = grad_y_in.contiguous(), rstd = rstd_in.contiguous();
  const bool want_x = output_mask[0], want_w = output_mask[1];
  const auto param_options = x.options().dtype(param_type);
  at::Tensor grad_x = at::empty(want_x ? x.sizes() : at::IntArrayRef{0}, x.options());
  at::Tensor grad_w = at::empty(want_w ? normalized_shape : at::IntArrayRef{0}, param_options);
  const int64_t M = x.numel() / N;
  if (M == 0) {
    if (want_w) grad_w.zero_();
    return {grad_x, grad_w};
  }
  // the kernels always write grad_x and grad_weight: where not wanted, into buffers that are dropped
  const at::Tensor dx = want_x ? grad_x : at::empty(x.sizes(), x.options());
  const at::Tensor dw = want_w ? grad_w : at::empty({N}, param_options);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto run = [&](auto param_zero) {
      using P = decltype(param_zero);
      if (x.is_cpu()) {
        at::Tensor wk;
        std::vector<P> wf;
        norm_cpu::backward<norm_cpu::Norm::kRms>(
            grad_y.data_ptr<scalar_t>(), static_cast<const scalar_t*>(nullptr), x.data_ptr<scalar_t>(),
            static_cast<const acc_t*>(nullptr), rstd.data_ptr<acc_t>(), cpu_param<P>(weight, N, 1, wk, wf),
            dx.data_ptr<scalar_t>(), dw.data_ptr<P>(), static_cast<P*>(nullptr), M, N);
        return;
      }
#ifdef WITH_CUDA
      using cuda_t = typename CudaType<scalar_t>::type;
      using cuda_p = typename CudaType<P>::type;
      const OnDevice on(x);
      const at::Tensor w = cuda_param(weight, x, N, 1);
      const cuda_t *gy = cuda_ptr<scalar_t>(grad_y), *xp = cuda_ptr<scalar_t>(x), *wp = cuda_ptr<scalar_t>(w);
      cuda_t* gx = cuda_ptr<scalar_t>(dx);
      cuda_p* gw = cuda_ptr<P>(dw);
      if (version == 1) {
        rmsnorm_backward_v1<cuda_t, cuda_p>(gy, xp, rstd.data_ptr<acc_t>(), wp, gx, gw, M, int(N), on.stream);
      } else {
        at::Tensor workspace =
            at::empty({rmsnorm_backward_v2_workspace<cuda_t>(gy, xp, wp, gx, M, int(N))}, rstd.options());
        rmsnorm_backward_v2<cuda_t, cuda_p>(gy, xp, rstd.data_ptr<acc_t>(), wp, gx, gw,
                                            workspace.data_ptr<acc_t>(), M, int(N), on.stream);
      }
#endif
    };
    norm_ops::with_param_type<scalar_t>(param_type, run);
  });
  return {grad_x, grad_w};
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// The lesson's functions (the pybind11 module): over the last dimension, any version.
// ---------------------------------------------------------------------------------------------------

std::vector<at::Tensor> forward(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                std::optional<double> eps, int64_t version) {
  check_version(version, 2);
  check_not_0d(x, "x");
  auto [y, rstd] = forward_impl(x, {x.size(-1)}, weight, eps, version);
  return {y, rstd};
}

std::vector<at::Tensor> backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& rstd,
                                 const std::optional<at::Tensor>& weight, int64_t version) {
  check_version(version, 2);
  check_not_0d(x, "x");
  auto [gx, gw] = backward_impl(grad_y, x, {x.size(-1)}, rstd, weight, {true, true}, version);
  return {gx, gw};
}

// ---------------------------------------------------------------------------------------------------
// The op, with aten::rms_norm's arguments:
//
//   course::rms_norm(x, normalized_shape, weight?, eps?) -> y          differentiable (Autograd kernel below)
//   course::rms_norm_forward(same) -> (y, rstd)                         what autograd saves
//   course::rms_norm_backward(grad_y, x, normalized_shape, rstd, weight?, output_mask) -> (grad_x,
//   grad_weight)
//
// The kernels are forward v2 and backward v2. Autocast: native rms_norm has no autocast rule (it is on
// neither of autocast's lists: under torch.autocast it runs in its inputs' dtypes and returns x's dtype), so
// ours runs unchanged too; the AutocastCUDA kernel below says so explicitly. The fakes are in
// helpers/ops/rmsnorm.py.
// ---------------------------------------------------------------------------------------------------

using ForwardResult = std::tuple<at::Tensor, at::Tensor>;

ForwardResult rms_norm_forward_kernel(const at::Tensor& x, at::IntArrayRef normalized_shape,
                                      const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  return forward_impl(x, normalized_shape, weight, eps, 2);
}

at::Tensor rms_norm_kernel(const at::Tensor& x, at::IntArrayRef normalized_shape,
                           const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  return std::get<0>(forward_impl(x, normalized_shape, weight, eps, 2));
}

ForwardResult rms_norm_backward_kernel(const at::Tensor& grad_y, const at::Tensor& x,
                                       at::IntArrayRef normalized_shape, const at::Tensor& rstd,
                                       const std::optional<at::Tensor>& weight,
                                       std::array<bool, 2> output_mask) {
  return backward_impl(grad_y, x, normalized_shape, rstd, weight, output_mask, 2);
}

using RmsNormSig = at::Tensor(const at::Tensor&, c10::SymIntArrayRef, const std::optional<at::Tensor>&,
                              std::optional<double>);
using ForwardSig = ForwardResult(const at::Tensor&, c10::SymIntArrayRef, const std::optional<at::Tensor>&,
                                 std::optional<double>);
using BackwardSig = ForwardResult(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                                  const at::Tensor&, const std::optional<at::Tensor>&, std::array<bool, 2>);

// The backward node autograd runs for course::rms_norm, written by hand as course::layer_norm's is
// (kernels/common/library.h says why; what it costs a step: benchmarks/autograd.py): its edges lead to x and
// weight (an invalid edge for None or for a tensor that needs no gradient); it holds x, weight and rstd as
// SavedVariables, which check at unpack time that nothing wrote to them in place since, and how many trailing
// dimensions are normalized. Backward calls course::rms_norm_backward through the dispatcher, below the
// Autograd key (under torch.compile the tensors are fake and go to the fake kernels).
struct RmsNormBackward : torch::autograd::Node {
  torch::autograd::SavedVariable x, weight, rstd;
  int64_t dims = 0;

  std::string name() const override { return "RmsNormBackward (course::rms_norm)"; }
  void release_variables() override {
    for (auto* v : {&x, &weight, &rstd}) v->reset_data();
  }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    static const auto backward_op = op<BackwardSig>("rms_norm_backward");
    const bool want_x = should_compute_output(0), want_w = should_compute_output(1);
    if (!grads[0].defined() || !(want_x || want_w)) return {at::Tensor(), at::Tensor()};
    const auto x_ = x.unpack(), w_ = weight.unpack();
    const auto normalized_shape = x_.sym_sizes().slice(x_.dim() - dims);
    auto [grad_x, grad_w] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      return backward_op.call(grads[0], x_, normalized_shape, rstd.unpack(),
                              w_.defined() ? std::optional<at::Tensor>(w_) : std::nullopt, {want_x, want_w});
    }();
    return once_differentiable("rms_norm", {want_x ? grad_x : at::Tensor(), want_w ? grad_w : at::Tensor()},
                               grads);
  }
};

// The device is checked before the dispatcher picks the next kernel by every tensor's device (a CPU x with
// a "meta" weight would go to the fake kernel, not to ours that says what is wrong).
at::Tensor rms_norm_autograd(const at::Tensor& x, c10::SymIntArrayRef normalized_shape,
                             const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  if (defined(weight)) check_same_device(*weight, "weight", x, "x");
  static const auto forward_op = op<ForwardSig>("rms_norm_forward");
  check_no_forward_ad("rms_norm", x, weight);
  auto [y, rstd] = [&] {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return forward_op.call(x, normalized_shape, weight, eps);
  }();
  if (torch::autograd::compute_requires_grad(x, weight)) {
    const auto node = std::shared_ptr<RmsNormBackward>(new RmsNormBackward(), torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(x, weight));
    node->x = torch::autograd::SavedVariable(x, false);
    if (defined(weight)) node->weight = torch::autograd::SavedVariable(*weight, false);
    node->rstd = torch::autograd::SavedVariable(rstd, false);
    node->dims = int64_t(normalized_shape.size());
    torch::autograd::set_history(y, node);
  }
  return y;
}

const auto& rms_norm_op() {
  static const auto handle = op<RmsNormSig>("rms_norm");
  return handle;
}

// Autocast on CUDA: native rms_norm's rule, which is none: the op runs in its inputs' dtypes.
at::Tensor rms_norm_autocast_cuda(const at::Tensor& x, c10::SymIntArrayRef normalized_shape,
                                  const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  return rms_norm_op().call(x, normalized_shape, weight, eps);
}

COURSE_LIBRARY(m) {
  define(m, "rms_norm(Tensor x, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor");
  define(m,
         "rms_norm_forward(Tensor x, SymInt[] normalized_shape, Tensor? weight, float? eps) -> (Tensor, "
         "Tensor)");
  define(m,
         "rms_norm_backward(Tensor grad_y, Tensor x, SymInt[] normalized_shape, Tensor rstd, Tensor? weight, "
         "bool[2] output_mask) -> (Tensor, Tensor)");
}
COURSE_IMPL_CPU_CUDA(m) {
  m.impl("rms_norm", &rms_norm_kernel);
  m.impl("rms_norm_forward", &rms_norm_forward_kernel);
  m.impl("rms_norm_backward", &rms_norm_backward_kernel);
}
TORCH_LIBRARY_IMPL(course, Autograd, m) { m.impl("rms_norm", &rms_norm_autograd); }
TORCH_LIBRARY_IMPL(course, AutocastCUDA, m) { m.impl("rms_norm", &rms_norm_autocast_cuda); }

// The registered op called from C++ (less CPU time per eager call than torch.ops' boxed call).
at::Tensor rms_norm(const at::Tensor& x, std::vector<int64_t> normalized_shape,
                    const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  return rms_norm_op().call(x, c10::fromIntArrayRefSlow(normalized_shape), weight, eps);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "RMSNorm over the last dimension, forward and backward (lesson 05)";
  m.def("forward", &forward, "[y, rstd]", py::arg("x"), py::arg("weight"), py::arg("eps") = py::none(),
        py::arg("version") = 2);
  m.def("backward", &backward, "[grad_x, grad_weight]", py::arg("grad_y"), py::arg("x"), py::arg("rstd"),
        py::arg("weight"), py::arg("version") = 2);
  m.def("rms_norm", &rms_norm, "torch.ops.course.rms_norm: y, differentiable", py::arg("x"),
        py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("eps") = py::none());
}
