// kernels/add_norm/add_norm.cpp: the PyTorch side of the fused residual add + norm (lesson 05), the pre-norm
// transformer's `h = x + residual; y = norm(h)` as one op returning (y, h), for RMSNorm and LayerNorm.
//
//   course::add_rms_norm(x, residual, normalized_shape, weight?, eps?) -> (y, h)           differentiable
//   course::add_rms_norm_forward(same) -> (y, h, rstd)
//   course::add_rms_norm_backward(grad_y, grad_h?, h, normalized_shape, rstd, weight?, output_mask)
//       -> (grad_input, grad_weight)
//   course::add_layer_norm(x, residual, normalized_shape, weight?, bias?, eps) -> (y, h)   differentiable
//   course::add_layer_norm_forward(same) -> (y, h, mean, rstd)
//   course::add_layer_norm_backward(grad_y, grad_h?, h, normalized_shape, mean, rstd, weight?, bias?,
//       output_mask) -> (grad_input, grad_weight, grad_bias)
//   forward(x, residual, weight, eps=None) -> [y, h, rstd]   the pybind module: add + RMSNorm, last dimension
//
// x and residual have the same shape and dtype (helpers/ops/add_norm.py promotes them first, as `x +
// residual` would); h has it too, and is rounded to that dtype before it is normalized, as the unfused
// pair does. grad_input is the gradient of x and of residual alike (h = x + residual): the norm's grad_x
// plus grad_h. Parameters, eps and statistics as kernels/rmsnorm/rmsnorm.cpp (RMSNorm) and
// kernels/layernorm/layernorm.cpp (LayerNorm) take them. Autocast (CUDA): add_rms_norm runs unchanged, as
// native rms_norm and add do; add_layer_norm gives what native `layer_norm(x + residual)` gives under
// autocast: h in the inputs' dtype, y in float32 (layer_norm is on autocast's float32 list).
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
#include "add_norm.h"
#endif

using namespace norm_ops;
using norm_cpu::Norm;

namespace {

using Four = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Three = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// (y, h, mean, rstd); mean is an empty tensor for RMSNorm.
template <Norm kNorm>
Four forward_impl(const at::Tensor& x_in, const at::Tensor& res_in, at::IntArrayRef normalized_shape,
                  const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                  double eps) {
  const int64_t N = check_x(x_in, normalized_shape);
  check_floating(res_in, "residual");
  check_same_device(res_in, "residual", x_in, "x");
  check_same_dtype(res_in, "residual", x_in, "x");
  check_shape(res_in, "residual", x_in.sizes());
  const at::ScalarType param_type =
      check_params(x_in, normalized_shape, {{&weight, "weight"}, {&bias, "bias"}});
  check_eps(eps);
  const at::Tensor x = x_in.contiguous(), res = res_in.contiguous();
  const auto leading = x.sizes().slice(0, x.dim() - normalized_shape.size());
  at::Tensor y = at::empty(x.sizes(), x.options()), h = at::empty(x.sizes(), x.options());
  const auto stats = x.options().dtype(acc_dtype(x));
  at::Tensor mean = kNorm == Norm::kLayer ? at::empty(leading, stats) : at::empty({0}, stats);
  at::Tensor rstd = at::empty(leading, stats);
  const int64_t M = x.numel() / N;
  if (M == 0) return {y, h, mean, rstd};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "add_norm_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    acc_t* mp = kNorm == Norm::kLayer ? mean.data_ptr<acc_t>() : nullptr;
    if (x.is_cpu()) {
      const auto run = [&](auto param_zero) {
        using P = decltype(param_zero);
        at::Tensor wk, bk;
        std::vector<P> wf, bf;
        norm_cpu::forward<kNorm>(x.data_ptr<scalar_t>(), res.data_ptr<scalar_t>(),
                                 cpu_param<P>(weight, N, 1, wk, wf), cpu_param<P>(bias, N, 0, bk, bf),
                                 y.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(), mp, rstd.data_ptr<acc_t>(),
                                 M, N, static_cast<acc_t>(eps));
      };
      norm_ops::with_param_type<scalar_t>(param_type, run);
      return;
    }
#ifdef WITH_CUDA
    using cuda_t = typename CudaType<scalar_t>::type;
    const OnDevice on(x);
    const at::Tensor w = cuda_param(weight, x, N, 1);
    const cuda_t *xp = cuda_ptr<scalar_t>(x), *rp = cuda_ptr<scalar_t>(res), *wp = cuda_ptr<scalar_t>(w);
    cuda_t *yp = cuda_ptr<scalar_t>(y), *hp = cuda_ptr<scalar_t>(h);
    const auto e = static_cast<acc_t>(eps);
    if constexpr (kNorm == Norm::kLayer) {
      const at::Tensor b = cuda_param(bias, x, N, 0);
      add_layer_norm_forward<cuda_t>(xp, rp, wp, cuda_ptr<scalar_t>(b), yp, hp, mp, rstd.data_ptr<acc_t>(), M,
                                     int(N), e, on.stream);
    } else {
      add_rms_norm_forward<cuda_t>(xp, rp, wp, yp, hp, rstd.data_ptr<acc_t>(), M, int(N), e, on.stream);
    }
#endif
  });
  return {y, h, mean, rstd};
}

// (grad_input, grad_weight, grad_bias); output_mask as layer_norm's: an empty [0] tensor for each gradient
// left out (grad_bias always, for RMSNorm).
template <Norm kNorm>
Three backward_impl(const at::Tensor& grad_y_in, const std::optional<at::Tensor>& grad_h_in,
                    const at::Tensor& h_in, at::IntArrayRef normalized_shape, const at::Tensor& mean_in,
                    const at::Tensor& rstd_in, const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  const int64_t N = check_x(h_in, normalized_shape, "h");
  const at::ScalarType param_type =
      check_params(h_in, normalized_shape, {{&weight, "weight"}, {&bias, "bias"}});
  check_grad(grad_y_in, "grad_y", h_in, "h");
  if (defined(grad_h_in)) check_grad(*grad_h_in, "grad_h", h_in, "h");
  const auto leading = h_in.sizes().slice(0, h_in.dim() - normalized_shape.size());
  if constexpr (kNorm == Norm::kLayer) check_stats(mean_in, "mean", h_in, leading);
  check_stats(rstd_in, "rstd", h_in, leading);
  const at::Tensor h = h_in.contiguous(), grad_y = grad_y_in.contiguous(), rstd = rstd_in.contiguous();
  const at::Tensor mean = kNorm == Norm::kLayer ? mean_in.contiguous() : at::Tensor();
  const at::Tensor grad_h = defined(grad_h_in) ? grad_h_in->contiguous() : at::Tensor();
  const bool want_x = output_mask[0], want_w = output_mask[1],
             want_b = output_mask[2] && kNorm == Norm::kLayer;
  const auto param_options = h.options().dtype(param_type);
  at::Tensor grad_in = at::empty(want_x ? h.sizes() : at::IntArrayRef{0}, h.options());
  at::Tensor grad_w = at::empty(want_w ? normalized_shape : at::IntArrayRef{0}, param_options);
  at::Tensor grad_b = at::empty(want_b ? normalized_shape : at::IntArrayRef{0}, param_options);
  const int64_t M = h.numel() / N;
  if (M == 0) {
    if (want_w) grad_w.zero_();
    if (want_b) grad_b.zero_();
    return {grad_in, grad_w, grad_b};
  }
  // the kernels always write every gradient: where not wanted, into buffers that are dropped
  const at::Tensor dx = want_x ? grad_in : at::empty(h.sizes(), h.options());
  const at::Tensor dw = want_w ? grad_w : at::empty({N}, param_options);
  const at::Tensor db = want_b ? grad_b : at::empty({kNorm == Norm::kLayer ? N : 0}, param_options);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, h.scalar_type(), "add_norm_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t* mp = kNorm == Norm::kLayer ? mean.data_ptr<acc_t>() : nullptr;
    const auto run = [&](auto param_zero) {
      using P = decltype(param_zero);
      P* dbp = kNorm == Norm::kLayer ? db.data_ptr<P>() : nullptr;
      if (h.is_cpu()) {
        at::Tensor wk;
        std::vector<P> wf;
        norm_cpu::backward<kNorm>(
            grad_y.data_ptr<scalar_t>(), grad_h.defined() ? grad_h.data_ptr<scalar_t>() : nullptr,
            h.data_ptr<scalar_t>(), mp, rstd.data_ptr<acc_t>(), cpu_param<P>(weight, N, 1, wk, wf),
            dx.data_ptr<scalar_t>(), dw.data_ptr<P>(), dbp, M, N);
        return;
      }
#ifdef WITH_CUDA
      using cuda_t = typename CudaType<scalar_t>::type;
      using cuda_p = typename CudaType<P>::type;
      const OnDevice on(h);
      const at::Tensor w = cuda_param(weight, h, N, 1);
      const cuda_t *gy = cuda_ptr<scalar_t>(grad_y), *hp = cuda_ptr<scalar_t>(h), *wp = cuda_ptr<scalar_t>(w);
      const cuda_t* gh = grad_h.defined() ? cuda_ptr<scalar_t>(grad_h) : nullptr;
      cuda_t* gx = cuda_ptr<scalar_t>(dx);
      cuda_p* gw = cuda_ptr<P>(dw);
      if constexpr (kNorm == Norm::kLayer) {
        at::Tensor ws = at::empty({add_layer_norm_backward_workspace<cuda_t>(gy, gh, hp, wp, gx, M, int(N))},
                                  rstd.options());
        add_layer_norm_backward<cuda_t, cuda_p>(gy, gh, hp, mp, rstd.data_ptr<acc_t>(), wp, gx, gw,
                                                reinterpret_cast<cuda_p*>(dbp), ws.data_ptr<acc_t>(), M,
                                                int(N), on.stream);
      } else {
        at::Tensor ws = at::empty({add_rms_norm_backward_workspace<cuda_t>(gy, gh, hp, wp, gx, M, int(N))},
                                  rstd.options());
        add_rms_norm_backward<cuda_t, cuda_p>(gy, gh, hp, rstd.data_ptr<acc_t>(), wp, gx, gw,
                                              ws.data_ptr<acc_t>(), M, int(N), on.stream);
      }
#endif
    };
    norm_ops::with_param_type<scalar_t>(param_type, run);
  });
  return {grad_in, grad_w, grad_b};
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// The ops' CPU and CUDA kernels
// ---------------------------------------------------------------------------------------------------

using Pair = std::tuple<at::Tensor, at::Tensor>;

Three add_rms_norm_forward_kernel(const at::Tensor& x, const at::Tensor& residual,
                                  at::IntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
                                  std::optional<double> eps) {
  auto [y, h, mean, rstd] =
      forward_impl<Norm::kRms>(x, residual, normalized_shape, weight, std::nullopt, default_eps(x, eps));
  return {y, h, rstd};
}

Pair add_rms_norm_kernel(const at::Tensor& x, const at::Tensor& residual, at::IntArrayRef normalized_shape,
                         const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  auto [y, h, mean, rstd] =
      forward_impl<Norm::kRms>(x, residual, normalized_shape, weight, std::nullopt, default_eps(x, eps));
  return {y, h};
}

Pair add_rms_norm_backward_kernel(const at::Tensor& grad_y, const std::optional<at::Tensor>& grad_h,
                                  const at::Tensor& h, at::IntArrayRef normalized_shape,
                                  const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                                  std::array<bool, 2> output_mask) {
  auto [gi, gw, gb] =
      backward_impl<Norm::kRms>(grad_y, grad_h, h, normalized_shape, at::Tensor(), rstd, weight, std::nullopt,
                                {output_mask[0], output_mask[1], false});
  return {gi, gw};
}

Four add_layer_norm_forward_kernel(const at::Tensor& x, const at::Tensor& residual,
                                   at::IntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
                                   const std::optional<at::Tensor>& bias, double eps) {
  return forward_impl<Norm::kLayer>(x, residual, normalized_shape, weight, bias, eps);
}

Pair add_layer_norm_kernel(const at::Tensor& x, const at::Tensor& residual, at::IntArrayRef normalized_shape,
                           const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                           double eps) {
  auto [y, h, mean, rstd] = forward_impl<Norm::kLayer>(x, residual, normalized_shape, weight, bias, eps);
  return {y, h};
}

Three add_layer_norm_backward_kernel(const at::Tensor& grad_y, const std::optional<at::Tensor>& grad_h,
                                     const at::Tensor& h, at::IntArrayRef normalized_shape,
                                     const at::Tensor& mean, const at::Tensor& rstd,
                                     const std::optional<at::Tensor>& weight,
                                     const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  return backward_impl<Norm::kLayer>(grad_y, grad_h, h, normalized_shape, mean, rstd, weight, bias,
                                     output_mask);
}

// ---------------------------------------------------------------------------------------------------
// Autograd: forward and backward call the ops through the dispatcher, below the Autograd key. Saved: h,
// weight (and bias; None stays None), the statistics, how many trailing dimensions are normalized. A
// gradient autograd did not send (y or h unused) is zeros for grad_y, None for grad_h.
// ---------------------------------------------------------------------------------------------------

using AddRmsSig = Pair(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                       const std::optional<at::Tensor>&, std::optional<double>);
using AddRmsForwardSig = Three(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                               const std::optional<at::Tensor>&, std::optional<double>);
using AddRmsBackwardSig = Pair(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                               c10::SymIntArrayRef, const at::Tensor&, const std::optional<at::Tensor>&,
                               std::array<bool, 2>);
using AddLayerSig = Pair(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                         const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, double);
using AddLayerForwardSig = Four(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                                const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, double);
using AddLayerBackwardSig = Three(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                                  c10::SymIntArrayRef, const at::Tensor&, const at::Tensor&,
                                  const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                                  std::array<bool, 3>);

at::Tensor grad_or_zeros(const at::Tensor& g, const at::Tensor& like) {
  return g.defined() ? g : at::zeros_like(like, at::MemoryFormat::Contiguous);
}

class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& residual,
                                                c10::SymIntArrayRef normalized_shape,
                                                const std::optional<at::Tensor>& weight,
                                                std::optional<double> eps) {
    static const auto forward_op = op<AddRmsForwardSig>("add_rms_norm_forward");
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, h, rstd] = forward_op.call(x, residual, normalized_shape, weight, eps);
    ctx->save_for_backward({h, weight.value_or(at::Tensor()), rstd});
    ctx->saved_data["dims"] = int64_t(normalized_shape.size());
    return {y, h};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static const auto backward_op = op<AddRmsBackwardSig>("add_rms_norm_backward");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &h = saved[0], &weight = saved[1];
    const bool want_x = ctx->needs_input_grad(0), want_r = ctx->needs_input_grad(1);
    const bool want_w = weight.defined() && ctx->needs_input_grad(2);
    const int64_t dims = ctx->saved_data["dims"].toInt();
    const auto normalized_shape = h.sym_sizes().slice(h.dim() - dims);
    auto [grad_in, grad_w] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      return backward_op.call(grad_or_zeros(grads[0], h), opt(grads[1]), h, normalized_shape, saved[2],
                              opt(weight), {want_x || want_r, want_w});
    }();
    // x, residual, normalized_shape, weight, eps
    return once_differentiable("add_rms_norm",
                               {want_x ? grad_in : at::Tensor(), want_r ? grad_in : at::Tensor(),
                                at::Tensor(), want_w ? grad_w : at::Tensor(), at::Tensor()},
                               grads);
  }
};

class AddLayerNormFunction : public torch::autograd::Function<AddLayerNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& residual,
                                                c10::SymIntArrayRef normalized_shape,
                                                const std::optional<at::Tensor>& weight,
                                                const std::optional<at::Tensor>& bias, double eps) {
    static const auto forward_op = op<AddLayerForwardSig>("add_layer_norm_forward");
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, h, mean, rstd] = forward_op.call(x, residual, normalized_shape, weight, bias, eps);
    ctx->save_for_backward({h, weight.value_or(at::Tensor()), bias.value_or(at::Tensor()), mean, rstd});
    ctx->saved_data["dims"] = int64_t(normalized_shape.size());
    return {y, h};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static const auto backward_op = op<AddLayerBackwardSig>("add_layer_norm_backward");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &h = saved[0], &weight = saved[1], &bias = saved[2];
    size_t edge =
        0;  // needs_input_grad counts the tensors given: x, residual, then weight and bias if not None
    const bool want_x = ctx->needs_input_grad(edge++), want_r = ctx->needs_input_grad(edge++);
    const bool want_w = weight.defined() && ctx->needs_input_grad(edge++);
    const bool want_b = bias.defined() && ctx->needs_input_grad(edge++);
    const int64_t dims = ctx->saved_data["dims"].toInt();
    const auto normalized_shape = h.sym_sizes().slice(h.dim() - dims);
    auto [grad_in, grad_w, grad_b] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      return backward_op.call(grad_or_zeros(grads[0], h), opt(grads[1]), h, normalized_shape, saved[3],
                              saved[4], opt(weight), opt(bias), {want_x || want_r, want_w, want_b});
    }();
    // x, residual, normalized_shape, weight, bias, eps
    return once_differentiable(
        "add_layer_norm",
        {want_x ? grad_in : at::Tensor(), want_r ? grad_in : at::Tensor(), at::Tensor(),
         want_w ? grad_w : at::Tensor(), want_b ? grad_b : at::Tensor(), at::Tensor()},
        grads);
  }
};

// The devices are checked before the dispatcher picks the next kernel by every tensor's device (a CPU x
// with a "meta" weight would go to the fake kernel, not to ours that says what is wrong).
void check_devices(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                   const std::optional<at::Tensor>& bias) {
  check_same_device(residual, "residual", x, "x");
  if (defined(weight)) check_same_device(*weight, "weight", x, "x");
  if (defined(bias)) check_same_device(*bias, "bias", x, "x");
}

Pair add_rms_norm_autograd(const at::Tensor& x, const at::Tensor& residual,
                           c10::SymIntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
                           std::optional<double> eps) {
  check_devices(x, residual, weight, std::nullopt);
  auto out = AddRmsNormFunction::apply(x, residual, normalized_shape, weight, eps);
  return {out[0], out[1]};
}

Pair add_layer_norm_autograd(const at::Tensor& x, const at::Tensor& residual,
                             c10::SymIntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& bias, double eps) {
  check_devices(x, residual, weight, bias);
  auto out = AddLayerNormFunction::apply(x, residual, normalized_shape, weight, bias, eps);
  return {out[0], out[1]};
}

const auto& add_rms_norm_op() {
  static const auto handle = op<AddRmsSig>("add_rms_norm");
  return handle;
}

const auto& add_layer_norm_op() {
  static const auto handle = op<AddLayerSig>("add_layer_norm");
  return handle;
}

// Autocast on CUDA. add_rms_norm: none of its parts has an autocast rule, so it runs unchanged.
Pair add_rms_norm_autocast_cuda(const at::Tensor& x, const at::Tensor& residual,
                                c10::SymIntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
                                std::optional<double> eps) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  return add_rms_norm_op().call(x, residual, normalized_shape, weight, eps);
}

// add_layer_norm: under autocast native's `x + residual` stays in the inputs' dtype and layer_norm runs in
// float32, so a float16/bfloat16 call returns h in that dtype and a float32 y normalized from the rounded h.
// Our kernels write h and y in one dtype, so such a call runs that pair as native does (the add, then
// LayerNorm in float32); float32 and float64 inputs, which autocast leaves alone, run our fused op.
Pair add_layer_norm_autocast_cuda(const at::Tensor& x, const at::Tensor& residual,
                                  c10::SymIntArrayRef normalized_shape,
                                  const std::optional<at::Tensor>& weight,
                                  const std::optional<at::Tensor>& bias, double eps) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  const auto cuda = c10::DeviceType::CUDA;
  if (!at::autocast::is_autocast_eligible(x, cuda) || x.scalar_type() == at::kFloat)
    return add_layer_norm_op().call(x, residual, normalized_shape, weight, bias, eps);
  at::Tensor h = at::add(x, residual);
  at::Tensor y = at::layer_norm_symint(h.to(at::kFloat), normalized_shape,
                                       at::autocast::cached_cast(at::kFloat, weight, cuda),
                                       at::autocast::cached_cast(at::kFloat, bias, cuda), eps);
  return {y, h};
}

COURSE_LIBRARY(m) {
  define(m,
         "add_rms_norm(Tensor x, Tensor residual, SymInt[] normalized_shape, Tensor? weight=None, float? "
         "eps=None) "
         "-> (Tensor, Tensor)");
  define(m,
         "add_rms_norm_forward(Tensor x, Tensor residual, SymInt[] normalized_shape, Tensor? weight, float? "
         "eps) -> "
         "(Tensor, Tensor, Tensor)");
  define(m,
         "add_rms_norm_backward(Tensor grad_y, Tensor? grad_h, Tensor h, SymInt[] normalized_shape, Tensor "
         "rstd, "
         "Tensor? weight, bool[2] output_mask) -> (Tensor, Tensor)");
  define(m,
         "add_layer_norm(Tensor x, Tensor residual, SymInt[] normalized_shape, Tensor? weight=None, Tensor? "
         "bias=None, float eps=1e-05) -> (Tensor, Tensor)");
  define(m,
         "add_layer_norm_forward(Tensor x, Tensor residual, SymInt[] normalized_shape, Tensor? weight, "
         "Tensor? bias, "
         "float eps) -> (Tensor, Tensor, Tensor, Tensor)");
  define(m,
         "add_layer_norm_backward(Tensor grad_y, Tensor? grad_h, Tensor h, SymInt[] normalized_shape, Tensor "
         "mean, "
         "Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}
COURSE_IMPL_CPU_CUDA(m) {
  m.impl("add_rms_norm", &add_rms_norm_kernel);
  m.impl("add_rms_norm_forward", &add_rms_norm_forward_kernel);
  m.impl("add_rms_norm_backward", &add_rms_norm_backward_kernel);
  m.impl("add_layer_norm", &add_layer_norm_kernel);
  m.impl("add_layer_norm_forward", &add_layer_norm_forward_kernel);
  m.impl("add_layer_norm_backward", &add_layer_norm_backward_kernel);
}
TORCH_LIBRARY_IMPL(course, Autograd, m) {
  m.impl("add_rms_norm", &add_rms_norm_autograd);
  m.impl("add_layer_norm", &add_layer_norm_autograd);
}
TORCH_LIBRARY_IMPL(course, AutocastCUDA, m) {
  m.impl("add_rms_norm", &add_rms_norm_autocast_cuda);
  m.impl("add_layer_norm", &add_layer_norm_autocast_cuda);
}

// ---------------------------------------------------------------------------------------------------
// The pybind11 module: the registered ops called from C++ (less CPU time per eager call than torch.ops),
// and forward, add + RMSNorm over the last dimension as the lesson calls it.
// ---------------------------------------------------------------------------------------------------

std::vector<at::Tensor> forward(const at::Tensor& x, const at::Tensor& residual,
                                const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  check_not_0d(x, "x");
  auto [y, h, rstd] = add_rms_norm_forward_kernel(x, residual, {x.size(-1)}, weight, eps);
  return {y, h, rstd};
}

Pair add_rms_norm(const at::Tensor& x, const at::Tensor& residual, std::vector<int64_t> normalized_shape,
                  const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  return add_rms_norm_op().call(x, residual, c10::fromIntArrayRefSlow(normalized_shape), weight, eps);
}

Pair add_layer_norm(const at::Tensor& x, const at::Tensor& residual, std::vector<int64_t> normalized_shape,
                    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                    double eps) {
  return add_layer_norm_op().call(x, residual, c10::fromIntArrayRefSlow(normalized_shape), weight, bias, eps);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Fused residual add + RMSNorm / LayerNorm, forward and backward (lesson 05)";
  m.def("forward", &forward, "add + RMSNorm over the last dimension: [y, h, rstd]", py::arg("x"),
        py::arg("residual"), py::arg("weight"), py::arg("eps") = py::none());
  m.def("add_rms_norm", &add_rms_norm, "torch.ops.course.add_rms_norm: (y, h), differentiable", py::arg("x"),
        py::arg("residual"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
        py::arg("eps") = py::none());
  m.def("add_layer_norm", &add_layer_norm, "torch.ops.course.add_layer_norm: (y, h), differentiable",
        py::arg("x"), py::arg("residual"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
        py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
}
