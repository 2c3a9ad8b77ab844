// batchnorm_relu.cpp: the PyTorch side of course::batchnorm_relu (lesson 09's practice set: the answer):
// fused BatchNorm + ReLU in training, x [N, C, H, W] in contiguous NCHW or channels-last, read as it is laid
// out.
//
//   course::batchnorm_relu(x, weight, bias, running_mean!, running_var!, momentum, eps) -> (y, mean, rstd)
//   course::batchnorm_relu_backward(grad_y, y, x, weight, mean, rstd) -> (grad_x, grad_weight, grad_bias)
//
// This file checks the inputs (an error names the argument), picks the layout (channels-last where x is laid
// out so, else contiguous NCHW), allocates the outputs in it, picks the dtype and runs the CPU loops
// (batchnorm_relu.cpu.cpp, over threads) or the CUDA launchers (batchnorm_relu.cu,
// batchnorm_relu_backward.cu) on PyTorch's current stream; then registers both functions as the ops' CPU and
// CUDA kernels, and the forward's version-counter bump of the running statistics. batchnorm_relu.py registers
// the rest: the fake kernels and the autograd formula.
//
// x is float32, float64, float16 or bfloat16; weight, bias, running_mean, running_var, mean and rstd are [C]
// float32 (float64 when x is float64), as nn.BatchNorm2d keeps them under mixed precision.
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: makes the library importable as a Python module

#include <algorithm>
#include <tuple>

#include "batchnorm_relu_cpu.h"
#include "common/checks.h"
#include "common/library.h"
#ifdef WITH_CUDA
#include "batchnorm_relu.h"
#endif

#define BN_DISPATCH(TYPE, NAME, ...)                                                                      \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                                                          \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__) AT_DISPATCH_CASE(at::kDouble, __VA_ARGS__) \
                         AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)                                         \
                             AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

namespace {

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

constexpr int64_t kGrain = 32768;  // values per CPU task: smaller tasks cost more to hand out than they take
constexpr int64_t kCpuRows = 128;  // rows of a channels-last x per CPU partial (a fixed cut: the same bits
                                   // whatever the number of threads)

int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t grain(int64_t values_per_item) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, values_per_item));
}

// The layout the kernels read: channels-last where x is laid out so and is not also contiguous (a tensor with
// C == 1, or H == W == 1, is both: read as NCHW), else contiguous NCHW (a copy of an x that is neither).
bool is_channels_last(const at::Tensor& x) {
  return !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast);
}
at::MemoryFormat format_of(bool channels_last) {
  return channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

void check_x(const at::Tensor& x) {
  check_floating(x, "x");
  check_cuda_built(x, "x");
  TORCH_CHECK_VALUE(x.dim() == 4, "x must be 4-D [N, C, H, W], got shape ", shape_str(x.sizes()));
}

// weight, bias, the running and the saved statistics: [C] on x's device, float32 (float64 for a float64 x).
void check_channel_vector(const at::Tensor& t, const char* name, const at::Tensor& x) {
  check_defined(t, name);
  check_same_device(t, name, x, "x");
  TORCH_CHECK_TYPE(t.scalar_type() == acc_dtype(x), name, " must be ",
                   x.scalar_type() == at::kDouble ? "float64 (x is float64)"
                                                  : "float32 (for a float32, float16 or bfloat16 x)",
                   ", got ", t.scalar_type());
  check_shape(t, name, {x.size(1)});
}

// The running statistics are written in place, through their data pointers.
void check_running(const at::Tensor& t, const char* name, const at::Tensor& x) {
  check_channel_vector(t, name, x);
  TORCH_CHECK_VALUE(t.is_contiguous(), name, " must be contiguous: the op updates it in place");
}

template <typename T>
void forward_cpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& y,
                 const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& running_mean,
                 const at::Tensor& running_var, bool channels_last, double momentum, double eps) {
  using A = BnAcc<T>;
  const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3), M = N * HW;
  const T* xp = x.data_ptr<T>();
  A* mp = mean.data_ptr<A>();
  const at::Tensor m2 = at::empty({C}, mean.options());
  A* m2p = m2.data_ptr<A>();
  if (!channels_last) {
    at::parallel_for(0, C, grain(M),
                     [&](int64_t b, int64_t e) { bn_stats_nchw_cpu(xp, N, C, HW, b, e, mp, m2p); });
  } else {
    const int64_t parts = ceil_div64(M, kCpuRows);
    const at::Tensor part = at::empty({2, parts, C}, mean.options());
    A *pm = part[0].data_ptr<A>(), *pm2 = part[1].data_ptr<A>();
    at::parallel_for(0, parts, grain(kCpuRows * C), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p)
        bn_stats_cl_cpu(xp, C, p * kCpuRows, std::min(M, (p + 1) * kCpuRows), pm + p * C, pm2 + p * C);
    });
    at::parallel_for(0, C, grain(parts), [&](int64_t b, int64_t e) {
      bn_merge_cpu(pm, pm2, parts, kCpuRows, M, C, b, e, mp, m2p);
    });
  }
  bn_finalize_cpu(mp, m2p, M, C, A(momentum), A(eps), rstd.data_ptr<A>(), running_mean.data_ptr<A>(),
                  running_var.data_ptr<A>());
  const A *rp = rstd.data_ptr<A>(), *wp = weight.data_ptr<A>(), *bp = bias.data_ptr<A>();
  T* yp = y.data_ptr<T>();
  if (!channels_last)
    at::parallel_for(0, N * C, grain(HW),
                     [&](int64_t b, int64_t e) { bn_apply_nchw_cpu(xp, yp, mp, rp, wp, bp, C, HW, b, e); });
  else
    at::parallel_for(0, M, grain(C),
                     [&](int64_t b, int64_t e) { bn_apply_cl_cpu(xp, yp, mp, rp, wp, bp, C, b, e); });
}

template <typename T>
void backward_cpu(const at::Tensor& grad_y, const at::Tensor& y, const at::Tensor& x,
                  const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& rstd,
                  const at::Tensor& grad_x, const at::Tensor& grad_weight, const at::Tensor& grad_bias,
                  bool channels_last) {
  using A = BnAcc<T>;
  const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3), M = N * HW;
  const T *gp = grad_y.data_ptr<T>(), *yp = y.data_ptr<T>(), *xp = x.data_ptr<T>();
  const A* mp = mean.data_ptr<A>();
  const at::Tensor sums = at::empty({5, C}, mean.options());  // sum(g), sum(g * (x - mean)), then k, p, q
  A *sg = sums[0].data_ptr<A>(), *sgx = sums[1].data_ptr<A>();
  if (!channels_last) {
    at::parallel_for(0, C, grain(3 * M), [&](int64_t b, int64_t e) {
      bn_backward_sums_nchw_cpu(gp, yp, xp, mp, N, C, HW, b, e, sg, sgx);
    });
  } else {
    const int64_t parts = ceil_div64(M, kCpuRows);
    const at::Tensor part = at::empty({2, parts, C}, mean.options());
    A *pg = part[0].data_ptr<A>(), *pgx = part[1].data_ptr<A>();
    at::parallel_for(0, parts, grain(3 * kCpuRows * C), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p)
        bn_backward_sums_cl_cpu(gp, yp, xp, mp, C, p * kCpuRows, std::min(M, (p + 1) * kCpuRows), pg + p * C,
                                pgx + p * C);
    });
    at::parallel_for(0, C, grain(parts), [&](int64_t b, int64_t e) {
      bn_sum_partials_cpu(pg, parts, C, b, e, sg);
      bn_sum_partials_cpu(pgx, parts, C, b, e, sgx);
    });
  }
  A *k = sums[2].data_ptr<A>(), *p = sums[3].data_ptr<A>(), *q = sums[4].data_ptr<A>();
  bn_backward_finalize_cpu(sg, sgx, weight.data_ptr<A>(), rstd.data_ptr<A>(), M, C, grad_weight.data_ptr<A>(),
                           grad_bias.data_ptr<A>(), k, p, q);
  T* gxp = grad_x.data_ptr<T>();
  if (!channels_last)
    at::parallel_for(0, N * C, grain(4 * HW), [&](int64_t b, int64_t e) {
      bn_backward_apply_nchw_cpu(gp, yp, xp, mp, k, p, q, gxp, C, HW, b, e);
    });
  else
    at::parallel_for(0, M, grain(4 * C), [&](int64_t b, int64_t e) {
      bn_backward_apply_cl_cpu(gp, yp, xp, mp, k, p, q, gxp, C, b, e);
    });
}

}  // namespace

Outputs batchnorm_relu_kernel(const at::Tensor& x_in, const at::Tensor& weight_in, const at::Tensor& bias_in,
                              at::Tensor& running_mean, at::Tensor& running_var, double momentum,
                              double eps) {
  check_x(x_in);
  check_channel_vector(weight_in, "weight", x_in);
  check_channel_vector(bias_in, "bias", x_in);
  check_running(running_mean, "running_mean", x_in);
  check_running(running_var, "running_var", x_in);
  const int64_t N = x_in.size(0), C = x_in.size(1), HW = x_in.size(2) * x_in.size(3);
  TORCH_CHECK_VALUE(N * HW != 1, "x has one value per channel (shape ", shape_str(x_in.sizes()),
                    "): batch statistics in training need more than one (nn.BatchNorm2d refuses it too)");
  const bool channels_last = is_channels_last(x_in);
  const at::Tensor x = channels_last ? x_in : x_in.contiguous();
  const at::Tensor y = at::empty(x.sizes(), x.options().memory_format(format_of(channels_last)));
  const at::Tensor mean = at::empty({C}, weight_in.options()), rstd = at::empty({C}, weight_in.options());
  // An empty batch (or no channel): as native, no statistics, and the running ones left as they were.
  if (x.numel() == 0) {
    mean.zero_();
    rstd.zero_();
    return {y, mean, rstd};
  }
  const at::Tensor weight = weight_in.contiguous(), bias = bias_in.contiguous();
  BN_DISPATCH(x.scalar_type(), "batchnorm_relu", [&] {
    if (x.is_cpu()) {
      forward_cpu<scalar_t>(x, weight, bias, y, mean, rstd, running_mean, running_var, channels_last,
                            momentum, eps);
      return;
    }
#ifdef WITH_CUDA
    using T = typename CudaType<scalar_t>::type;
    using A = Acc<T>;
    const OnDevice on(x);
    const bool vectorized =
        (channels_last ? C : HW) % kPack16<T> == 0 && aligned16(x.data_ptr()) && aligned16(y.data_ptr());
    const BnPlan plan = batchnorm_relu_forward_plan_cuda<T>(N, C, HW, channels_last, vectorized);
    const at::Tensor work = at::empty({3 * plan.partials}, weight.options());
    batchnorm_relu_forward_cuda<T>(cuda_ptr<scalar_t>(x), weight.data_ptr<A>(), bias.data_ptr<A>(),
                                   cuda_ptr<scalar_t>(y), mean.data_ptr<A>(), rstd.data_ptr<A>(),
                                   running_mean.data_ptr<A>(), running_var.data_ptr<A>(), work.data_ptr<A>(),
                                   plan, N, C, HW, A(momentum), A(eps), on.stream);
#endif
  });
  return {y, mean, rstd};
}

Outputs batchnorm_relu_backward_kernel(const at::Tensor& grad_y_in, const at::Tensor& y_in,
                                       const at::Tensor& x_in, const at::Tensor& weight_in,
                                       const at::Tensor& mean_in, const at::Tensor& rstd_in) {
  check_x(x_in);
  check_like(grad_y_in, "grad_y", x_in, "x");
  check_same_dtype(grad_y_in, "grad_y", x_in, "x");
  check_like(y_in, "y", x_in, "x");
  check_same_dtype(y_in, "y", x_in, "x");
  check_channel_vector(weight_in, "weight", x_in);
  check_channel_vector(mean_in, "mean", x_in);
  check_channel_vector(rstd_in, "rstd", x_in);
  const int64_t N = x_in.size(0), C = x_in.size(1), HW = x_in.size(2) * x_in.size(3);
  const bool channels_last = is_channels_last(x_in);
  const at::MemoryFormat format = format_of(channels_last);
  // grad_y and y read in x's layout (a copy where autograd hands over another one, such as an expanded
  // grad_y)
  const at::Tensor x = x_in.contiguous(format), y = y_in.contiguous(format),
                   grad_y = grad_y_in.contiguous(format);
  const at::Tensor grad_x = at::empty(x.sizes(), x.options().memory_format(format));
  const at::Tensor grad_weight = at::empty({C}, weight_in.options()),
                   grad_bias = at::empty({C}, weight_in.options());
  if (x.numel() == 0) {  // no values: every sum is 0
    grad_weight.zero_();
    grad_bias.zero_();
    return {grad_x, grad_weight, grad_bias};
  }
  const at::Tensor weight = weight_in.contiguous(), mean = mean_in.contiguous(), rstd = rstd_in.contiguous();
  BN_DISPATCH(x.scalar_type(), "batchnorm_relu_backward", [&] {
    if (x.is_cpu()) {
      backward_cpu<scalar_t>(grad_y, y, x, weight, mean, rstd, grad_x, grad_weight, grad_bias, channels_last);
      return;
    }
#ifdef WITH_CUDA
    using T = typename CudaType<scalar_t>::type;
    using A = Acc<T>;
    const OnDevice on(x);
    const bool vectorized = (channels_last ? C : HW) % kPack16<T> == 0 && aligned16(grad_y.data_ptr()) &&
                            aligned16(y.data_ptr()) && aligned16(x.data_ptr()) &&
                            aligned16(grad_x.data_ptr());
    const BnPlan plan = batchnorm_relu_backward_plan_cuda<T>(N, C, HW, channels_last, vectorized);
    const at::Tensor work = at::empty({2 * plan.partials}, weight.options());
    batchnorm_relu_backward_cuda<T>(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(y), cuda_ptr<scalar_t>(x),
                                    weight.data_ptr<A>(), mean.data_ptr<A>(), rstd.data_ptr<A>(),
                                    cuda_ptr<scalar_t>(grad_x), grad_weight.data_ptr<A>(),
                                    grad_bias.data_ptr<A>(), work.data_ptr<A>(), plan, N, C, HW, on.stream);
#endif
  });
  return {grad_x, grad_weight, grad_bias};
}

namespace {

// The running statistics are written in place, so their version counters move, as those of a native in-place
// op's arguments do: a backward that saved their old values then fails loudly instead of reading the new
// ones. PyTorch's own ops do it at this dispatch key, between autograd and the kernels.
Outputs batchnorm_relu_inplace_or_view(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                       at::Tensor& running_mean, at::Tensor& running_var, double momentum,
                                       double eps) {
  static const auto forward = op<Outputs(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&,
                                         at::Tensor&, double, double)>("batchnorm_relu");
  Outputs out;
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    out = forward.call(x, weight, bias, running_mean, running_var, momentum, eps);
  }
  torch::autograd::impl::bump_version(running_mean);
  torch::autograd::impl::bump_version(running_var);
  return out;
}

}  // namespace

// The schemas, and the functions above as the CPU and CUDA kernels (common/library.h: define() lets a rebuilt
// op load again into the same process). Tensor(a!) and Tensor(b!): the op writes running_mean and
// running_var.
COURSE_LIBRARY(m) {
  define(
      m,
      "batchnorm_relu(Tensor x, Tensor weight, Tensor bias, Tensor(a!) running_mean, Tensor(b!) running_var, "
      "float momentum, float eps) -> (Tensor, Tensor, Tensor)");
  define(m,
         "batchnorm_relu_backward(Tensor grad_y, Tensor y, Tensor x, Tensor weight, Tensor mean, Tensor "
         "rstd) -> "
         "(Tensor, Tensor, Tensor)");
}

COURSE_IMPL_CPU_CUDA(m) {
  m.impl("batchnorm_relu", &batchnorm_relu_kernel);
  m.impl("batchnorm_relu_backward", &batchnorm_relu_backward_kernel);
}

TORCH_LIBRARY_IMPL(course, ADInplaceOrView, m) { m.impl("batchnorm_relu", &batchnorm_relu_inplace_or_view); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() =
      "course::batchnorm_relu and course::batchnorm_relu_backward (torch.ops.course): loading registers them";
}
