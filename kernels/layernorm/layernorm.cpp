// kernels/layernorm/layernorm.cpp: the PyTorch side of LayerNorm (lesson 03), and the real PyTorch op it
// becomes (lesson 04).
//
//   forward(x, weight, bias, eps=1e-5, version=3, kernel="auto") -> [y, mean, rstd]
//   backward(grad_y, x, mean, rstd, weight, version=2, kernel="auto") -> [grad_x, grad_weight, grad_bias]
//   layer_norm(x, normalized_shape, weight, bias, eps) -> y       torch.ops.course.layer_norm, differentiable
//   describe(x, direction="forward") -> str                        which kernels that op runs for x
//
// `kernel` names which kernel runs forward v3 or backward v2 on the GPU
// (kernels/layernorm/layernorm_choices.h): forward "auto", "registers", "pipelined"; backward "auto",
// "two_kernels", "cooperative", "bulk_copy", "bulk_copy_split_barrier". "auto" runs the fastest measured on
// the GPU at hand; the others are there to be compared (benchmarks/tuning/layernorm.py,
// notebooks/03b_layernorm_hopper.ipynb). They change speed only, never results beyond rounding; on the CPU
// the name is checked and the CPU code runs.
//
// x has any shape [..., N] (lesson 04's op: [..., *normalized_shape], N their product, so x is an [M, N]
// matrix seen row by row); weight and bias are [N] (normalized_shape) with x's dtype and device, or float32
// for a float16/bfloat16 x as native layer_norm allows; the op also takes None for either. mean and rstd
// have x's leading shape and are float32 (float64 for float64 x): forward saves them so backward need not
// recompute the statistics. This file checks the inputs, allocates the outputs, picks the dtype
// (AT_DISPATCH) and calls the CPU code below or the CUDA launchers of layernorm.cu on PyTorch's current
// stream. On the CPU every version runs the same two-pass code, except forward version 2 and backward
// version 1, which run the exercises' CPU parts (Part 1 of kernels/exercises/layernorm_warp_reduce.cuh and
// layernorm_backward_row.cuh, compiled in layernorm.exercises.cpp and declared in layernorm_cpu.h).
#include <ATen/Parallel.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "common/library.h"
#include "common/norm_ops.h"
#include "layernorm_choices.h"
#include "layernorm_cpu.h"

#ifdef WITH_CUDA
#include <map>
#include <mutex>

#include "layernorm.h"
#endif

namespace {

// ---------------------------------------------------------------------------------------------------
// Input checks
// ---------------------------------------------------------------------------------------------------

using norm_ops::check_eps;
using norm_ops::check_grad;
using norm_ops::check_stats;
using norm_ops::check_x;
using norm_ops::defined;

// weight and bias (where given): kernels/common/norm_ops.h's rule, native layer_norm's (x's dtype, or float32
// for both beside a float16/bfloat16 x). Returns the parameters' dtype (x's where neither is given).
at::ScalarType check_params(const at::Tensor& x, at::IntArrayRef normalized_shape,
                            const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias) {
  return norm_ops::check_params(x, normalized_shape, {{&weight, "weight"}, {&bias, "bias"}});
}

// Python's `kernel` name as the enum of layernorm_choices.h: one of `names`, and other than "auto" only
// for the version that has the choice (forward v3, backward v2).
template <typename Kernel, size_t K>
Kernel kernel_named(const std::string& name, const std::pair<Kernel, const char*> (&names)[K], const char* op,
                    int64_t version, int64_t version_with_choice) {
  const Kernel kernel = check_choice(name, (std::string(op) + " kernel").c_str(), names);
  TORCH_CHECK_VALUE(kernel == Kernel::kAuto || version == version_with_choice, op, " kernel=\"", name,
                    "\" is a kernel of version ", std::to_string(version_with_choice), ", got version ",
                    std::to_string(version));
  return kernel;
}

// ---------------------------------------------------------------------------------------------------
// Parameters as the kernels take them: [N] contiguous pointers.
// ---------------------------------------------------------------------------------------------------

// On the CPU the parameter's data, or (None) a row of ones or zeros; on the GPU a contiguous [N] tensor of
// x's dtype (a float32 parameter of a mixed call cast to it), or a kept row of ones or zeros: the CUDA
// kernels read weight and bias in their innermost loops, and a row costs less than a null check in each.
using norm_ops::cpu_param;

#ifdef WITH_CUDA
using norm_ops::cuda_param;

// Backward v2's workspace (the blocks' partial column sums), kept per device, stream and dtype and reused by
// the next call on that stream: work on one stream runs in order, so a later call cannot overwrite partial
// sums an earlier one still reads, and each step allocates one tensor less (an allocation is a few
// microseconds of CPU, and at small shapes the step's CPU time is its time: benchmarks/profile_step.py).
// Only small workspaces are kept (at most kKeptWorkspaceBytes; a larger one belongs to a step whose kernels
// take far longer than an allocation), and none while a CUDA graph is being captured (the graph's own pool
// must own what it uses). Like kernels/common/norm_ops.h's constant_row map, never destroyed.
constexpr int64_t kKeptWorkspaceBytes = 8 << 20;

at::Tensor backward_workspace(const at::Tensor& x, int64_t numel, at::ScalarType acc_type) {
  const auto options = x.options().dtype(acc_type);
  const int64_t bytes = numel * int64_t(c10::elementSize(acc_type));
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  if (bytes > kKeptWorkspaceBytes) return at::empty({numel}, options);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  COURSE_CUDA_CHECK(cudaStreamIsCapturing(stream.stream(), &capture));
  if (capture != cudaStreamCaptureStatusNone) return at::empty({numel}, options);
  using Key = std::tuple<int, cudaStream_t, int>;
  static std::mutex mutex;
  static auto* kept = new std::map<Key, at::Tensor>();
  const Key key{int(x.device().index()), stream.stream(), int(acc_type)};
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& buffer = (*kept)[key];
  if (!buffer.defined() || buffer.numel() < numel) buffer = at::empty({numel}, options);
  return buffer;
}

#endif

// ---------------------------------------------------------------------------------------------------
// Forward and backward for any normalized_shape, None or mixed-dtype parameters, any version.
// ---------------------------------------------------------------------------------------------------

// The version the registered op runs: on the GPU layernorm.route.cu's choice (the norm engine or the ladder's
// kAuto, its header says which where), on the CPU the same two-pass code as every version. Lesson 03's
// versions 1-3 (forward) and 1-2 (backward) are the ladder alone.
constexpr int64_t kOpVersion = 0;

std::tuple<at::Tensor, at::Tensor, at::Tensor> forward_impl(const at::Tensor& x_in,
                                                            at::IntArrayRef normalized_shape,
                                                            const std::optional<at::Tensor>& weight,
                                                            const std::optional<at::Tensor>& bias, double eps,
                                                            int64_t version, ForwardKernel kernel) {
  const int64_t N = check_x(x_in, normalized_shape);
  const at::ScalarType param_type = check_params(x_in, normalized_shape, weight, bias);
  check_eps(eps);
  const at::Tensor x = x_in.contiguous();
  const auto leading = x.sizes().slice(0, x.dim() - normalized_shape.size());
  at::Tensor y = at::empty(x.sizes(), x.options());
  at::Tensor mean = at::empty(leading, x.options().dtype(acc_dtype(x)));
  at::Tensor rstd = at::empty(leading, x.options().dtype(acc_dtype(x)));
  const int64_t M = x.numel() / N;
  if (M == 0) return {y, mean, rstd};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "layernorm_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (x.is_cpu()) {
      const auto run = [&](auto param_zero) {
        using P = decltype(param_zero);
        at::Tensor wk, bk;
        std::vector<P> wf, bf;
        layernorm_forward_cpu(x.data_ptr<scalar_t>(), cpu_param<P>(weight, N, 1, wk, wf),
                              cpu_param<P>(bias, N, 0, bk, bf), y.data_ptr<scalar_t>(),
                              mean.data_ptr<acc_t>(), rstd.data_ptr<acc_t>(), M, N, static_cast<acc_t>(eps),
                              version == 2);
      };
      norm_ops::with_param_type<scalar_t>(param_type, run);
      return;
    }
#ifdef WITH_CUDA
    using cuda_t = typename CudaType<scalar_t>::type;
    const OnDevice on(x);
    const at::Tensor w = cuda_param(weight, x, N, 1), b = cuda_param(bias, x, N, 0);
    const cuda_t *xp = cuda_ptr<scalar_t>(x), *wp = cuda_ptr<scalar_t>(w), *bp = cuda_ptr<scalar_t>(b);
    cuda_t* yp = cuda_ptr<scalar_t>(y);
    acc_t *mp = mean.data_ptr<acc_t>(), *rp = rstd.data_ptr<acc_t>();
    const auto e = static_cast<acc_t>(eps);
    if (version == 1) layernorm_forward_v1<cuda_t>(xp, wp, bp, yp, mp, rp, M, int(N), e, on.stream);
    if (version == 2) layernorm_forward_v2<cuda_t>(xp, wp, bp, yp, mp, rp, M, int(N), e, on.stream);
    if (version == 3) layernorm_forward_v3<cuda_t>(xp, wp, bp, yp, mp, rp, M, int(N), e, on.stream, kernel);
    if (version == kOpVersion) layernorm_forward<cuda_t>(xp, wp, bp, yp, mp, rp, M, int(N), e, on.stream);
#endif
  });
  return {y, mean, rstd};
}

// output_mask: which of grad_x, grad_weight, grad_bias to return; the others are empty [0] tensors (an op
// returns tensors, never None). grad_weight and grad_bias have shape normalized_shape and the parameters'
// dtype (weight's or bias's, x's where neither is given), and are computed whether or not that parameter
// was None (the sums of grad_y * xhat and of grad_y), as native layer_norm's backward does.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_impl(
    const at::Tensor& grad_y_in, const at::Tensor& x_in, at::IntArrayRef normalized_shape,
    const at::Tensor& mean_in, const at::Tensor& rstd_in, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask, int64_t version,
    BackwardKernel kernel) {
  const int64_t N = check_x(x_in, normalized_shape);
  const at::ScalarType param_type = check_params(x_in, normalized_shape, weight, bias);
  check_grad(grad_y_in, "grad_y", x_in, "x");
  const auto leading = x_in.sizes().slice(0, x_in.dim() - normalized_shape.size());
  check_stats(mean_in, "mean", x_in, leading);
  check_stats(rstd_in, "rstd", x_in, leading);
  const at::Tensor x = x_in.contiguous(), grad_y = grad_y_in.contiguous();
  const at::Tensor mean = mean_in.contiguous(), rstd = rstd_in.contiguous();
  const bool want_x = output_mask[0], want_w = output_mask[1], want_b = output_mask[2];
  const auto param_options = x.options().dtype(param_type);
  at::Tensor grad_x = want_x ? at::empty(x.sizes(), x.options()) : at::empty({0}, x.options());
  at::Tensor grad_w = want_w ? at::empty(normalized_shape, param_options) : at::empty({0}, param_options);
  at::Tensor grad_b = want_b ? at::empty(normalized_shape, param_options) : at::empty({0}, param_options);
  const int64_t M = x.numel() / N;
  if (M == 0) {
    if (want_w) grad_w.zero_();
    if (want_b) grad_b.zero_();
    return {grad_x, grad_w, grad_b};
  }
  // the kernels always write grad_x: where it is not wanted, into a buffer that is dropped
  const at::Tensor dx = want_x ? grad_x : at::empty(x.sizes(), x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "layernorm_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (x.is_cpu()) {
      const auto run = [&](auto param_zero) {
        using P = decltype(param_zero);
        at::Tensor wk;
        std::vector<P> wf;
        layernorm_backward_cpu(grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<acc_t>(),
                               rstd.data_ptr<acc_t>(), cpu_param<P>(weight, N, 1, wk, wf),
                               dx.data_ptr<scalar_t>(), want_w ? grad_w.data_ptr<P>() : nullptr,
                               want_b ? grad_b.data_ptr<P>() : nullptr, M, N, version == 1);
      };
      norm_ops::with_param_type<scalar_t>(param_type, run);
      return;
    }
#ifdef WITH_CUDA
    using cuda_t = typename CudaType<scalar_t>::type;
    const OnDevice on(x);
    const at::Tensor w = cuda_param(weight, x, N, 1);
    // The kernels write [N] sums of x's dtype: into grad_weight and grad_bias themselves where those are
    // wanted and of x's dtype; else into buffers, cast to float32 afterwards for a mixed call.
    const bool same = param_type == x.scalar_type();
    at::Tensor dw = want_w && same ? grad_w : at::empty({N}, x.options());
    at::Tensor db = want_b && same ? grad_b : at::empty({N}, x.options());
    const cuda_t *gy = cuda_ptr<scalar_t>(grad_y), *xp = cuda_ptr<scalar_t>(x), *wp = cuda_ptr<scalar_t>(w);
    cuda_t* gx = cuda_ptr<scalar_t>(dx);
    const acc_t *mp = mean.data_ptr<acc_t>(), *rp = rstd.data_ptr<acc_t>();
    cuda_t *gw = cuda_ptr<scalar_t>(dw), *gb = cuda_ptr<scalar_t>(db);
    if (version == 1) {
      layernorm_backward_v1<cuda_t>(gy, xp, mp, rp, wp, gx, gw, gb, M, int(N), on.stream);
    } else if (version == 2) {
      const at::Tensor workspace = backward_workspace(
          x, layernorm_backward_v2_workspace<cuda_t>(gy, xp, wp, gx, M, int(N), kernel), mean.scalar_type());
      layernorm_backward_v2<cuda_t>(gy, xp, mp, rp, wp, gx, gw, gb, workspace.data_ptr<acc_t>(), M, int(N),
                                    on.stream, kernel);
    } else {  // kOpVersion: the workspace sized by the same route as the launch
      const at::Tensor workspace = backward_workspace(
          x, layernorm_backward_workspace<cuda_t>(gy, xp, wp, gx, M, int(N)), mean.scalar_type());
      layernorm_backward<cuda_t>(gy, xp, mp, rp, wp, gx, gw, gb, workspace.data_ptr<acc_t>(), M, int(N),
                                 on.stream);
    }
    if (want_w && !same) grad_w.view({N}).copy_(dw);
    if (want_b && !same) grad_b.view({N}).copy_(db);
#endif
  });
  return {grad_x, grad_w, grad_b};
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Lesson 03's functions (the pybind11 module): over the last dimension, weight and bias given.
// ---------------------------------------------------------------------------------------------------

std::vector<at::Tensor> forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                double eps, int64_t version, const std::string& kernel_name) {
  check_version(version, 3);
  const ForwardKernel kernel = kernel_named(kernel_name, kForwardKernelNames, "forward", version, 3);
  check_defined(weight, "weight");
  check_defined(bias, "bias");
  check_floating(x, "x");
  TORCH_CHECK_VALUE(x.dim() >= 1, "x must have at least one dimension (the one normalized), got a scalar");
  auto [y, mean, rstd] = forward_impl(x, {x.size(-1)}, weight, bias, eps, version, kernel);
  return {y, mean, rstd};
}

std::vector<at::Tensor> backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& mean,
                                 const at::Tensor& rstd, const at::Tensor& weight, int64_t version,
                                 const std::string& kernel_name) {
  check_version(version, 2);
  const BackwardKernel kernel = kernel_named(kernel_name, kBackwardKernelNames, "backward", version, 2);
  check_defined(weight, "weight");
  check_floating(x, "x");
  TORCH_CHECK_VALUE(x.dim() >= 1, "x must have at least one dimension (the one normalized), got a scalar");
  auto [gx, gw, gb] = backward_impl(grad_y, x, {x.size(-1)}, mean, rstd, weight, std::nullopt,
                                    {true, true, true}, version, kernel);
  return {gx, gw, gb};
}

// Which kernels the op (course::layer_norm) runs for x, normalized over its last dimension, with fresh
// weight, bias and outputs: layernorm.route.cu's choice, named from the predicates its launchers use.
std::string describe(const at::Tensor& x, const std::string& direction) {
  check_floating(x, "x");
  TORCH_CHECK_VALUE(x.dim() >= 1, "x must have at least one dimension (the one normalized), got a scalar");
  TORCH_CHECK_VALUE(direction == "forward" || direction == "backward",
                    "direction must be \"forward\" or \"backward\", got \"", direction, "\"");
  const bool backward = direction == "backward";
  if (x.numel() == 0) return "none: x has no values (the op launches no kernel)";
  if (x.is_cpu()) return backward ? "cpu: layernorm_backward_cpu" : "cpu: layernorm_forward_cpu";
  std::string name = "none: this build has no CUDA kernels";
#ifdef WITH_CUDA
  const int64_t N = x.size(-1), M = x.numel() / N;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "layernorm_describe", [&] {
    using cuda_t = typename CudaType<scalar_t>::type;
    const OnDevice on(x);
    name = layernorm_describe<cuda_t>(cuda_ptr<scalar_t>(x), M, int(N), backward);
  });
#endif
  return name;
}

// ---------------------------------------------------------------------------------------------------
// The op as a real PyTorch op (lesson 04), with aten::layer_norm's arguments:
//
//   course::layer_norm(x, normalized_shape, weight?, bias?, eps) -> y              differentiable (Autograd
//       kernel below); its CPU and CUDA kernels serve calls that need no gradient
//   course::layer_norm_forward(same) -> (y, mean, rstd)                             what autograd saves
//   course::layer_norm_backward(grad_y, x, normalized_shape, mean, rstd, weight?, bias?, output_mask)
//       -> (grad_x, grad_weight, grad_bias)
//
// The kernels are layernorm.route.cu's choice (kOpVersion): the norm engine where its header's table says
// so, else lesson 03's forward v3 and backward v2 with kernel "auto". Under
// torch.autocast("cuda") layer_norm runs in float32, as native layer_norm does (it is on autocast's
// float32 list for CUDA; on the CPU autocast leaves native layer_norm alone, and so ours). The Autograd
// and AutocastCUDA kernels are in layernorm.autograd.cpp; the fake kernels torch.compile traces with are
// in helpers/ops/layernorm.py.
// ---------------------------------------------------------------------------------------------------

using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

ForwardResult layer_norm_forward_kernel(const at::Tensor& x, at::IntArrayRef normalized_shape,
                                        const std::optional<at::Tensor>& weight,
                                        const std::optional<at::Tensor>& bias, double eps) {
  return forward_impl(x, normalized_shape, weight, bias, eps, kOpVersion, ForwardKernel::kAuto);
}

at::Tensor layer_norm_kernel(const at::Tensor& x, at::IntArrayRef normalized_shape,
                             const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                             double eps) {
  return std::get<0>(forward_impl(x, normalized_shape, weight, bias, eps, kOpVersion, ForwardKernel::kAuto));
}

ForwardResult layer_norm_backward_kernel(const at::Tensor& grad_y, const at::Tensor& x,
                                         at::IntArrayRef normalized_shape, const at::Tensor& mean,
                                         const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                                         const std::optional<at::Tensor>& bias,
                                         std::array<bool, 3> output_mask) {
  return backward_impl(grad_y, x, normalized_shape, mean, rstd, weight, bias, output_mask, kOpVersion,
                       BackwardKernel::kAuto);
}

COURSE_LIBRARY(m) {
  define(
      m,
      "layer_norm(Tensor x, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> Tensor");
  define(
      m,
      "layer_norm_forward(Tensor x, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> "
      "(Tensor, Tensor, Tensor)");
  define(m,
         "layer_norm_backward(Tensor grad_y, Tensor x, SymInt[] normalized_shape, Tensor mean, Tensor rstd, "
         "Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}
COURSE_IMPL_CPU_CUDA(m) {
  m.impl("layer_norm", &layer_norm_kernel);
  m.impl("layer_norm_forward", &layer_norm_forward_kernel);
  m.impl("layer_norm_backward", &layer_norm_backward_kernel);
}
// The registered op called from C++, for lessons that hold the pybind11 module (layernorm.autograd.cpp).
at::Tensor layer_norm(const at::Tensor& x, std::vector<int64_t> normalized_shape,
                      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                      double eps);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "LayerNorm over the last dimension, forward and backward (lesson 03)";
  m.def("forward", &forward, "[y, mean, rstd]", py::arg("x"), py::arg("weight"), py::arg("bias"),
        py::arg("eps") = 1e-5, py::arg("version") = 3, py::arg("kernel") = "auto");
  m.def("backward", &backward, "[grad_x, grad_weight, grad_bias]", py::arg("grad_y"), py::arg("x"),
        py::arg("mean"), py::arg("rstd"), py::arg("weight"), py::arg("version") = 2,
        py::arg("kernel") = "auto");
  m.def("describe", &describe, "which kernels torch.ops.course.layer_norm runs for x (layernorm.route.cu)",
        py::arg("x"), py::arg("direction") = "forward");
  m.def("layer_norm", &layer_norm, "torch.ops.course.layer_norm: y, differentiable", py::arg("x"),
        py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
        py::arg("eps") = 1e-5);
}
