// kernels/norm_dropout/norm_dropout.cpp: the PyTorch side of RMSNorm followed by dropout, fused (lesson 05).
//
//   course::rms_norm_dropout(x, normalized_shape, weight?, eps?, p, train, generator=None)
//       -> (y, rstd, rng_state)
//   y = dropout(rms_norm(x, normalized_shape, weight, eps), p): the row statistic, the normalization, the
//   weight, the Philox mask and 1 / (1 - p) in one CUDA kernel (kernels/norm_dropout/norm_dropout.cu), y
//   written once. rstd: float32 (float64 for a float64 x) with x's leading shape, as course::rms_norm_forward
//   returns it. rng_state: int64 [2] on x's device, the (seed, offset) of the mask, as course::dropout
//   returns it.
//
// The mask is course::dropout's (kernels/common/dropout_rng.h, kernels/common/philox.cuh): flat element i of
// y is kept iff philox::keep(seed, offset, i, drop_threshold(p)). So y is
// course::dropout(course::rms_norm(x)) drawn at the same (seed, offset), except that a kept value is rounded
// to x's dtype once, x * rstd * w / (1 - p), rather than twice (after the norm, after the scale): the same
// bits for float32 and float64 where the row sums are added in the same order, within one rounding step for
// float16 and bfloat16. The CPU kernel below gives the same mask bits, and the values of course::rms_norm's
// CPU code followed by course::dropout's. train=False, or p = 0: course::rms_norm_forward itself (its y and
// rstd), rng_state [0, 0], nothing drawn; p = 1: its rstd, y = 0 exactly, nothing drawn (as course::dropout).
// Tagged nondeterministic_seeded (as course::dropout), so that compilers never merge two calls.
//
// course::rms_norm_dropout_backward(grad_y, x, normalized_shape, rstd, weight?, rng_state, p, output_mask)
//     -> (grad_x, grad_weight): the op's backward (RmsNormDropoutFunction below, which saves x, weight, rstd
//     and rng_state, 16 bytes instead of a mask). Backward v2: the mask regenerated as grad_y is read and
//     RMSNorm's backward in the same pass (kernels/norm_dropout/norm_dropout.cu's backward v2, and a CPU
//     loop), 3*M*N elements, for rows of up to 8 values a thread; longer rows, and p = 0 or 1, take v1:
//     course::dropout_backward regenerates the mask into grad_y, then course::rms_norm_backward, through
//     the dispatcher (two ops, so their modules must be loaded: helpers/ops/norm_dropout.py's register()
//     does that), which writes and reads the masked grad_y once more: 5*M*N elements. v2 keeps the masked
//     grad_y in the math type instead of rounding it to x's dtype, so float16/bfloat16 gradients differ from
//     v1's by that rounding. On the H100 v2 runs at 83 % of a copy against v1's 54 % (float32 4096 x 4096),
//     57 % against 49 % (bfloat16).
//
// The pybind11 module (the lesson's), over the last dimension: forward(x, weight, eps=None, p=0.5,
// train=True, version=1) -> [y, rstd, rng_state]; backward(grad_y, x, rstd, weight, rng_state, p, version=2)
// -> [grad_x, grad_weight] (version 1: the two ops); rms_norm_dropout(...), the op called from C++.
//
// x is [..., *normalized_shape]; weight has shape normalized_shape and x's dtype, float32 beside a
// float16/bfloat16 x, or is None; eps None is native rms_norm's (kernels/common/norm_ops.h, whose checks and
// words these are). helpers/ops/norm_dropout.py registers the fake kernel and has the public call and
// nn.Module.
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/dropout_rng.h"  // check_dropout_p, check_generator, draw_rng_state
#include "common/library.h"
#include "common/norm_ops.h"  // check_x, check_params, default_eps, check_eps, cpu_param, cuda_param
#include "common/philox.cuh"
#include "common/rmsnorm_cpu.h"  // and blocked_sum (kernels/common/blocked_sum.h): course::rms_norm's CPU row sum, so rstd has its bits

#ifdef WITH_CUDA
#include "norm_dropout.h"
#endif

using namespace norm_ops;

namespace {

using Result = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using RmsForwardSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, c10::SymIntArrayRef,
                                                         const std::optional<at::Tensor>&,
                                                         std::optional<double>);
using RmsBackwardSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                          c10::SymIntArrayRef, const at::Tensor&,
                                                          const std::optional<at::Tensor>&,
                                                          std::array<bool, 2>);
using DropoutBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, double);
using Sig = Result(const at::Tensor&, c10::SymIntArrayRef, const std::optional<at::Tensor>&,
                   std::optional<double>, double, bool, std::optional<at::Generator>);
using BackwardSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                       c10::SymIntArrayRef, const at::Tensor&,
                                                       const std::optional<at::Tensor>&, const at::Tensor&,
                                                       double, std::array<bool, 2>);

// ------------------------------------------------------------------------------------------------
// CPU implementation: course::rms_norm's row sum and expression (kernels/common/rmsnorm_cpu.h), then the mask
// of course::dropout's CPU loop; one Philox call per group of 4 flat elements (groups may straddle rows).
// ------------------------------------------------------------------------------------------------

template <typename T, typename P, typename acc_t>
void forward_cpu(const T* x, const P* w, T* y, acc_t* rstd, int64_t M, int64_t N, acc_t eps, uint64_t seed,
                 uint64_t offset, uint64_t threshold, acc_t scale) {
  at::parallel_for(0, M, std::max<int64_t>(1, 32768 / N), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * N;
      const acc_t sq = blocked_sum<acc_t>(N, [&](int64_t j) {
        const acc_t v = static_cast<acc_t>(xr[j]);
        return v * v;
      });
      const acc_t rs = acc_t(1) / std::sqrt(sq / N + eps);
      int64_t group = -1;
      uint32_t bits = 0;
      for (int64_t j = 0; j < N; ++j) {
        const int64_t i = r * N + j;
        if (i / 4 != group) {
          group = i / 4;
          bits = philox::keep_bits4(seed, offset, uint64_t(group), threshold);
        }
        const acc_t n = static_cast<acc_t>(xr[j]) * rs * static_cast<acc_t>(w[j]);
        y[i] = (bits >> (i % 4)) & 1u ? static_cast<T>(n * scale) : T(0);
      }
      rstd[r] = rs;
    }
  });
}

// Backward v2 on the CPU: per row, grad_y through the mask (g, in the math type, never rounded to T), then
// RMSNorm's backward of g; grad_weight summed per fixed chunk of rows, then the chunks in order (the same
// result whatever the number of threads), as kernels/common/rmsnorm_cpu.h's backward does.
template <typename T, typename P, typename acc_t>
void backward_cpu(const T* dy, const T* x, const acc_t* rstd, const P* w, T* dx, P* dw, int64_t M, int64_t N,
                  uint64_t seed, uint64_t offset, uint64_t threshold, acc_t scale) {
  const int64_t rows_per_chunk = std::max<int64_t>(64, (M + 63) / 64);
  const int64_t chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<acc_t> part(chunks * N, acc_t(0));
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    std::vector<acc_t> g(N);
    for (int64_t ch = cb; ch < ce; ++ch) {
      acc_t* pw = part.data() + ch * N;
      for (int64_t r = ch * rows_per_chunk; r < std::min(M, (ch + 1) * rows_per_chunk); ++r) {
        int64_t group = -1;
        uint32_t bits = 0;
        for (int64_t j = 0; j < N; ++j) {
          const int64_t i = r * N + j;
          if (i / 4 != group) {
            group = i / 4;
            bits = philox::keep_bits4(seed, offset, uint64_t(group), threshold);
          }
          g[j] = (bits >> (i % 4)) & 1u ? static_cast<acc_t>(dy[i]) * scale : acc_t(0);
        }
        const T* xr = x + r * N;
        const acc_t rs = rstd[r];
        const acc_t mgx =
            blocked_sum<acc_t>(N,
                               [&](int64_t j) {
                                 return g[j] * static_cast<acc_t>(w[j]) * (static_cast<acc_t>(xr[j]) * rs);
                               }) /
            N;
        for (int64_t j = 0; j < N; ++j) {
          const acc_t xh = static_cast<acc_t>(xr[j]) * rs;
          dx[r * N + j] = static_cast<T>(rs * (g[j] * static_cast<acc_t>(w[j]) - xh * mgx));
          pw[j] += g[j] * xh;
        }
      }
    }
  });
  at::parallel_for(0, N, 4096, [&](int64_t jb, int64_t je) {
    for (int64_t j = jb; j < je; ++j) {
      acc_t sum = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) sum += part[ch * N + j];
      dw[j] = static_cast<P>(sum);
    }
  });
}

const auto& rms_forward_op() {
  static const auto handle = op<RmsForwardSig>("rms_norm_forward");
  return handle;
}

Result forward_impl(const at::Tensor& x_in, at::IntArrayRef normalized_shape,
                    const std::optional<at::Tensor>& weight, std::optional<double> eps_in, double p,
                    bool train, const std::optional<at::Generator>& generator) {
  const int64_t N = check_x(x_in, normalized_shape);
  const at::ScalarType param_type = check_params(x_in, normalized_shape, {{&weight, "weight"}});
  const double eps = default_eps(x_in, eps_in);
  check_eps(eps);
  check_dropout_p(p);
  check_generator(generator, x_in);
  const auto state_options = x_in.options().dtype(at::kLong);
  if (!train || p == 0 || p == 1 || x_in.numel() == 0) {  // no mask to draw: the norm alone
    auto [y, rstd] = rms_forward_op().call(x_in, c10::fromIntArrayRefSlow(normalized_shape), weight, eps_in);
    if (train && p == 1) y.zero_();
    return {y, rstd, at::zeros({2}, state_options)};
  }
  const at::Tensor x = x_in.contiguous();
  const auto leading = x.sizes().slice(0, x.dim() - normalized_shape.size());
  at::Tensor y = at::empty(x.sizes(), x.options());
  at::Tensor rstd = at::empty(leading, x.options().dtype(acc_dtype(x)));
  at::Tensor state = at::empty({2}, state_options);  // the kernel writes it
  const int64_t M = x.numel() / N;
  const philox::RngState rng = draw_rng_state(generator, x);
  const uint64_t threshold = philox::drop_threshold(p);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rms_norm_dropout", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t scale = acc_t(1) / (acc_t(1) - acc_t(p));  // course::dropout's
    if (x.is_cpu()) {
      uint64_t seed, offset;
      philox::unpack(rng, seed, offset);
      const auto run = [&](auto param_zero) {
        using P = decltype(param_zero);
        at::Tensor wk;
        std::vector<P> wf;
        forward_cpu(x.data_ptr<scalar_t>(), cpu_param<P>(weight, N, 1, wk, wf), y.data_ptr<scalar_t>(),
                    rstd.data_ptr<acc_t>(), M, N, static_cast<acc_t>(eps), seed, offset, threshold, scale);
      };
      norm_ops::with_param_type<scalar_t>(param_type, run);
      state.data_ptr<int64_t>()[0] = static_cast<int64_t>(seed);
      state.data_ptr<int64_t>()[1] = static_cast<int64_t>(offset);
      return;
    }
#ifdef WITH_CUDA
    using cuda_t = typename CudaType<scalar_t>::type;
    const OnDevice on(x);
    const at::Tensor w = cuda_param(weight, x, N, 1);  // x's dtype, as course::rms_norm's kernels take it
    rms_norm_dropout_forward_v1<cuda_t>(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(w), cuda_ptr<scalar_t>(y),
                                        rstd.data_ptr<acc_t>(), M, int(N), static_cast<acc_t>(eps), rng,
                                        threshold, scale, state.data_ptr<int64_t>(), on.stream);
#endif
  });
  return {y, rstd, state};
}

Result rms_norm_dropout_kernel(const at::Tensor& x, at::IntArrayRef normalized_shape,
                               const std::optional<at::Tensor>& weight, std::optional<double> eps, double p,
                               bool train, std::optional<at::Generator> generator) {
  return forward_impl(x, normalized_shape, weight, eps, p, train, generator);
}

const auto& rms_norm_dropout_op() {
  static const auto handle = op<Sig>("rms_norm_dropout");
  return handle;
}

// Backward, over normalized_shape: v1 the two ops, course::dropout_backward then course::rms_norm_backward
// (through the dispatcher), v2 the fused pass (kernels/norm_dropout/norm_dropout.cu and backward_cpu above;
// v1 where a row is too long for it, and for p = 0 or 1, where there is no mask to fuse). output_mask: which
// of grad_x and grad_weight to return, the other an empty [0] tensor (an op returns tensors, never None);
// grad_weight has normalized_shape and weight's dtype (x's for None: the gradient of a weight of ones).
std::tuple<at::Tensor, at::Tensor> backward_impl(const at::Tensor& grad_y_in, const at::Tensor& x_in,
                                                 at::IntArrayRef normalized_shape, const at::Tensor& rstd_in,
                                                 const std::optional<at::Tensor>& weight,
                                                 const at::Tensor& rng_state, double p,
                                                 std::array<bool, 2> output_mask, int64_t version) {
  static const auto dropout_backward_op = op<DropoutBackwardSig>("dropout_backward");
  static const auto rms_backward_op = op<RmsBackwardSig>("rms_norm_backward");
  const int64_t N = check_x(x_in, normalized_shape);
  const at::ScalarType param_type = check_params(x_in, normalized_shape, {{&weight, "weight"}});
  check_grad(grad_y_in, "grad_y", x_in, "x");
  check_stats(rstd_in, "rstd", x_in, x_in.sizes().slice(0, x_in.dim() - normalized_shape.size()));
  check_dropout_p(p);
  check_rng_state(rng_state, "rng_state", grad_y_in, "grad_y");
  const auto v1 = [&] {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    const at::Tensor g = p > 0 ? dropout_backward_op.call(grad_y_in, rng_state, p) : grad_y_in;
    return rms_backward_op.call(g, x_in, c10::fromIntArrayRefSlow(normalized_shape), rstd_in, weight,
                                output_mask);
  };
  if (version == 1 || p == 0 || p == 1 || x_in.numel() == 0) return v1();
  const at::Tensor x = x_in.contiguous(), grad_y = grad_y_in.contiguous(), rstd = rstd_in.contiguous();
  const at::Tensor state = rng_state.contiguous();  // alive until the kernel has read it (stream order)
  at::Tensor grad_x = at::empty_like(x), grad_w = at::empty(normalized_shape, x.options().dtype(param_type));
  const int64_t M = x.numel() / N;
  const uint64_t threshold = philox::drop_threshold(p);
  bool done = true;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "rms_norm_dropout_backward", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const acc_t scale = acc_t(1) / (acc_t(1) - acc_t(p));
        const auto run = [&](auto param_zero) {
          using P = decltype(param_zero);
          if (x.is_cpu()) {
            at::Tensor wk;
            std::vector<P> wf;
            uint64_t seed, offset;
            philox::unpack(saved_rng_state(state), seed, offset);
            backward_cpu(grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), rstd.data_ptr<acc_t>(),
                         cpu_param<P>(weight, N, 1, wk, wf), grad_x.data_ptr<scalar_t>(),
                         grad_w.data_ptr<P>(), M, N, seed, offset, threshold, scale);
            return;
          }
#ifdef WITH_CUDA
          using cuda_t = typename CudaType<scalar_t>::type;
          const OnDevice on(x);
          const at::Tensor w = cuda_param(weight, x, N, 1);
          const cuda_t *gy = cuda_ptr<scalar_t>(grad_y), *xp = cuda_ptr<scalar_t>(x),
                       *wp = cuda_ptr<scalar_t>(w);
          cuda_t* gx = cuda_ptr<scalar_t>(grad_x);
          const int64_t size = rms_norm_dropout_backward_v2_workspace<cuda_t>(gy, xp, wp, gx, M, int(N));
          if (size == 0) {
            done = false;  // rows too long for v2
            return;
          }
          at::Tensor workspace = at::empty({size}, rstd.options());
          rms_norm_dropout_backward_v2<cuda_t, typename CudaType<P>::type>(
              gy, xp, rstd.data_ptr<acc_t>(), wp, gx, cuda_ptr<P>(grad_w), workspace.data_ptr<acc_t>(), M,
              int(N), saved_rng_state(state), threshold, scale, on.stream);
#endif
        };
        norm_ops::with_param_type<scalar_t>(param_type, run);
      });
  if (!done) return v1();
  const auto none = [&](const at::Tensor& t) { return at::empty({0}, t.options()); };
  return {output_mask[0] ? grad_x : none(grad_x), output_mask[1] ? grad_w : none(grad_w)};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_dropout_backward_kernel(
    const at::Tensor& grad_y, const at::Tensor& x, at::IntArrayRef normalized_shape, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, const at::Tensor& rng_state, double p,
    std::array<bool, 2> output_mask) {
  return backward_impl(grad_y, x, normalized_shape, rstd, weight, rng_state, p, output_mask, 2);
}

}  // namespace

// The op's autograd: backward is course::rms_norm_dropout_backward (v2, fused; v1 where it does not apply),
// through the dispatcher below the Autograd key. Saved: x, weight (None stays None), rstd, rng_state (16
// bytes), the p that was applied (0 in eval mode) and how many trailing dimensions are normalized. rstd and
// rng_state are outputs too, not differentiable.
class RmsNormDropoutFunction : public torch::autograd::Function<RmsNormDropoutFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                c10::SymIntArrayRef normalized_shape,
                                                const std::optional<at::Tensor>& weight,
                                                std::optional<double> eps, double p, bool train,
                                                std::optional<at::Generator> generator) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, rstd, state] = rms_norm_dropout_op().call(x, normalized_shape, weight, eps, p, train, generator);
    ctx->save_for_backward({x, weight.value_or(at::Tensor()), rstd, state});
    ctx->saved_data["dims"] = int64_t(normalized_shape.size());
    ctx->saved_data["p"] = train ? p : 0.0;
    ctx->mark_non_differentiable({rstd, state});
    return {y, rstd, state};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto backward_op = op<BackwardSig>("rms_norm_dropout_backward");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2], &state = saved[3];
    const double p = ctx->saved_data["p"].toDouble();
    const bool want_x = ctx->needs_input_grad(0);
    const bool want_w = weight.defined() && ctx->needs_input_grad(1);  // counts tensor arguments only
    const int64_t dims = ctx->saved_data["dims"].toInt();
    const auto normalized_shape = x.sym_sizes().slice(x.dim() - dims);
    auto [grad_x, grad_w] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      return backward_op.call(grads[0], x, normalized_shape, rstd, opt(weight), state, p, {want_x, want_w});
    }();
    // one gradient per argument of forward: x, normalized_shape, weight, eps, p, train, generator
    return once_differentiable("rms_norm_dropout",
                               {want_x ? grad_x : at::Tensor(), at::Tensor(), want_w ? grad_w : at::Tensor(),
                                at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()},
                               {grads[0]});
  }
};

namespace {

Result rms_norm_dropout_autograd(const at::Tensor& x, c10::SymIntArrayRef normalized_shape,
                                 const std::optional<at::Tensor>& weight, std::optional<double> eps, double p,
                                 bool train, std::optional<at::Generator> generator) {
  if (defined(weight)) check_same_device(*weight, "weight", x, "x");
  const bool grad = at::GradMode::is_enabled() &&
                    ((x.defined() && x.requires_grad()) || (defined(weight) && weight->requires_grad()));
  if (!grad) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return rms_norm_dropout_op().call(x, normalized_shape, weight, eps, p, train, generator);
  }
  auto out = RmsNormDropoutFunction::apply(x, normalized_shape, weight, eps, p, train, generator);
  return {out[0], out[1], out[2]};
}

}  // namespace

COURSE_LIBRARY(m) {
  define(m,
         "rms_norm_dropout(Tensor x, SymInt[] normalized_shape, Tensor? weight, float? eps, float p, bool "
         "train, "
         "Generator? generator=None) -> (Tensor y, Tensor rstd, Tensor rng_state)",
         {at::Tag::nondeterministic_seeded});
  define(m,
         "rms_norm_dropout_backward(Tensor grad_y, Tensor x, SymInt[] normalized_shape, Tensor rstd, Tensor? "
         "weight, Tensor rng_state, float p, bool[2] output_mask) -> (Tensor, Tensor)");
}
COURSE_IMPL_CPU_CUDA(m) {
  m.impl("rms_norm_dropout", &rms_norm_dropout_kernel);
  m.impl("rms_norm_dropout_backward", &rms_norm_dropout_backward_kernel);
}
TORCH_LIBRARY_IMPL(course, Autograd, m) { m.impl("rms_norm_dropout", &rms_norm_dropout_autograd); }

// The lesson's function (the pybind11 module): over the last dimension, through the op (differentiable).
std::vector<at::Tensor> forward(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                std::optional<double> eps, double p, bool train, int64_t version) {
  check_version(version, 1);
  check_not_0d(x, "x");
  auto [y, rstd, state] =
      rms_norm_dropout_op().call(x, {x.sym_size(-1)}, weight, eps, p, train, std::nullopt);
  return {y, rstd, state};
}

// The lesson's backward, over the last dimension: v1 the two ops, v2 the fused pass (what the op's autograd
// runs). [grad_x, grad_weight]; grad_weight has weight's dtype (x's for None: the gradient of a weight of
// ones).
std::vector<at::Tensor> backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& rstd,
                                 const std::optional<at::Tensor>& weight, const at::Tensor& rng_state,
                                 double p, int64_t version) {
  check_version(version, 2);
  check_not_0d(x, "x");
  auto [grad_x, grad_w] =
      backward_impl(grad_y, x, {x.size(-1)}, rstd, weight, rng_state, p, {true, true}, version);
  return {grad_x, grad_w};
}

// The registered op called from C++ (less CPU time per eager call than torch.ops' boxed call).
std::vector<at::Tensor> rms_norm_dropout(const at::Tensor& x, std::vector<int64_t> normalized_shape,
                                         const std::optional<at::Tensor>& weight, std::optional<double> eps,
                                         double p, bool train, std::optional<at::Generator> generator) {
  auto [y, rstd, state] = rms_norm_dropout_op().call(x, c10::fromIntArrayRefSlow(normalized_shape), weight,
                                                     eps, p, train, generator);
  return {y, rstd, state};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() =
      "RMSNorm followed by dropout, forward in one kernel, the mask regenerated in backward (lesson 05)";
  m.def("forward", &forward, "[y, rstd, rng_state] over the last dimension", py::arg("x"), py::arg("weight"),
        py::arg("eps") = py::none(), py::arg("p") = 0.5, py::arg("train") = true, py::arg("version") = 1);
  m.def("backward", &backward,
        "[grad_x, grad_weight] over the last dimension; version 1: the two ops, 2: fused (the op's)",
        py::arg("grad_y"), py::arg("x"), py::arg("rstd"), py::arg("weight"), py::arg("rng_state"),
        py::arg("p"), py::arg("version") = 2);
  m.def("rms_norm_dropout", &rms_norm_dropout,
        "torch.ops.course.rms_norm_dropout: [y, rstd, rng_state], differentiable in x and weight",
        py::arg("x"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
        py::arg("eps") = py::none(), py::arg("p") = 0.5, py::arg("train") = true,
        py::arg("generator") = py::none());
}
