// kernels/common/norm_ops.h: the PyTorch-side pieces every norm's glue shares: lesson 03's
// kernels/layernorm/layernorm.cpp and lesson 05's rmsnorm.cpp, add_norm.cpp and norm_dropout.cpp (each builds
// its own module; these are inline): argument checks in kernels/common/checks.h's words, the parameters as
// the kernels take them, and eps's default.
//
//   check_x(x, normalized_shape, "x")     x is [..., *normalized_shape], N >= 1, returns N
//   check_params(x, shape, {{&w, "weight"}, ...})  dtype x's, or float32 beside a half/bf16 x; shape; device
//   check_eps(eps), default_eps(x, eps)   eps None: native rms_norm's, the epsilon of x's math type
//   check_stats(t, "rstd", x, leading)    a saved statistic: float32 (float64 for a float64 x), leading shape
//   with_param_type<scalar_t>(type, run)  run(P{}), P float for float32 parameters of a half/bf16 x, else x's
//   cpu_param<P>(p, N, value, keep, fill) the parameter's data, or a row of `value` for None
//   cuda_param(p, x, N, value)            a contiguous [N] tensor of x's dtype, or a kept row of `value`
#pragma once

#include <climits>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "checks.h"

#ifdef WITH_CUDA
#include <map>
#include <mutex>
#include <tuple>

#include "common.h"
#endif

namespace norm_ops {

inline bool defined(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

inline const char* dtype_name(at::ScalarType s) {
  switch (s) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    default:
      return c10::toString(s);
  }
}

inline int64_t check_x(const at::Tensor& x, at::IntArrayRef normalized_shape, const char* name = "x") {
  check_floating(x, name);
  check_cuda_built(x, name);
  TORCH_CHECK_VALUE(x.dim() >= 1, name,
                    " must have at least one dimension (the one normalized), got a scalar");
  const int64_t k = int64_t(normalized_shape.size());
  TORCH_CHECK_VALUE(k >= 1, "normalized_shape must have at least one dimension, got []");
  TORCH_CHECK_VALUE(x.dim() >= k && x.sizes().slice(x.dim() - k) == normalized_shape, name,
                    "'s last dimensions must be normalized_shape ", shape_str(normalized_shape), ", got ",
                    name, " of shape ", shape_str(x.sizes()));
  int64_t N = 1;
  for (const int64_t n : normalized_shape) N *= n;
  if (k == 1) {  // the lessons' calls over the last dimension
    TORCH_CHECK_VALUE(N >= 1, name, "'s last dimension (the normalized size N) must be at least 1, got ",
                      shape_str(x.sizes()));
  } else {
    TORCH_CHECK_VALUE(N >= 1, "normalized_shape ", shape_str(normalized_shape),
                      " must have at least one element (the normalized size N), got ", name, " of shape ",
                      shape_str(x.sizes()));
  }
  TORCH_CHECK_VALUE(N <= INT_MAX, "the normalized size N (the product of normalized_shape ",
                    shape_str(normalized_shape), ") must be below 2^31, got ", std::to_string(N));
  return N;
}

// The parameters (where given) have shape normalized_shape and x's device, and x's dtype, or float32 for
// all of them beside a float16/bfloat16 x (native rms_norm and layer_norm take that "mixed" case, computed
// in float with float32 gradients; other combinations are refused). Returns their dtype (x's for none).
inline at::ScalarType check_params(
    const at::Tensor& x, at::IntArrayRef normalized_shape,
    std::initializer_list<std::pair<const std::optional<at::Tensor>*, const char*>> ps) {
  const bool reduced = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  std::optional<at::ScalarType> dtype;
  const char* first = nullptr;
  for (const auto& [p, name] : ps) {
    if (!defined(*p)) continue;
    const at::Tensor& t = **p;
    check_floating(t, name);
    check_same_device(t, name, x, "x");
    if (!reduced) check_same_dtype(t, name, x, "x");
    TORCH_CHECK_TYPE(!reduced || t.scalar_type() == x.scalar_type() || t.scalar_type() == at::kFloat, name,
                     " must have the dtype of x (", x.scalar_type(), ") or be float32 (Float), got ",
                     t.scalar_type());
    TORCH_CHECK_TYPE(!dtype || *dtype == t.scalar_type(), first, " and ", name,
                     " must have the same dtype (both ", x.scalar_type(), " like x, or both Float), got ",
                     first, " ", *dtype, " and ", name, " ", t.scalar_type());
    check_shape(t, name, normalized_shape);
    dtype = t.scalar_type();
    first = name;
  }
  return dtype.value_or(x.scalar_type());
}

inline void check_eps(double eps) {
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0, "eps must be a finite number >= 0, got ",
                    std::to_string(eps));
}

// eps None: what native rms_norm uses, the machine epsilon of the math type (float32's for float32, float16
// and bfloat16 x, float64's for float64), not of x's own dtype.
inline double default_eps(const at::Tensor& x, std::optional<double> eps) {
  if (eps) return *eps;
  return x.scalar_type() == at::kDouble ? std::numeric_limits<double>::epsilon()
                                        : double(std::numeric_limits<float>::epsilon());
}

inline void check_stats(const at::Tensor& t, const char* name, const at::Tensor& x, at::IntArrayRef leading) {
  TORCH_CHECK_VALUE(t.defined(), name, " must be a tensor, got None");
  check_same_device(t, name, x, "x");
  TORCH_CHECK_TYPE(t.scalar_type() == acc_dtype(x), name, " must be ", dtype_name(acc_dtype(x)),
                   " (what forward returns for a ", dtype_name(x.scalar_type()), " x), got ",
                   dtype_name(t.scalar_type()));
  check_shape(t, name, leading);
}

// A gradient beside its tensor: x's dtype, device and shape.
inline void check_grad(const at::Tensor& g, const char* name, const at::Tensor& x, const char* x_name) {
  check_floating(g, name);
  check_same_device(g, name, x, x_name);
  check_same_dtype(g, name, x, x_name);
  check_shape(g, name, x.sizes());
}

// run(P{}) with P the parameters' element type: float for float32 parameters beside a float16/bfloat16 x
// (the mixed call native layer_norm allows), else x's own scalar_t.
template <typename scalar_t, typename Run>
void with_param_type(at::ScalarType param_type, const Run& run) {
  if constexpr (!std::is_same_v<scalar_t, at::opmath_type<scalar_t>>)
    if (param_type == at::kFloat) return run(float{});
  run(scalar_t{});
}

template <typename P>
const P* cpu_param(const std::optional<at::Tensor>& p, int64_t N, float value, at::Tensor& keep,
                   std::vector<P>& fill) {
  if (!defined(p)) {
    fill.assign(N, static_cast<P>(value));
    return fill.data();
  }
  keep = p->contiguous();
  return keep.data_ptr<P>();
}

#ifdef WITH_CUDA
// A None weight or bias becomes a row of ones or zeros of x's dtype, made once per device, dtype, N and value
// and kept (never while a CUDA graph is being captured: the fill would only run at replay; then a new one,
// which the graph owns). The map is never destroyed (its tensors would be freed after the CUDA runtime
// shut down at exit).
inline at::Tensor constant_row(const at::Tensor& x, int64_t N, int value) {
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  COURSE_CUDA_CHECK(cudaStreamIsCapturing(stream.stream(), &capture));
  const auto make = [&] { return at::full({N}, value, x.options()); };
  if (capture != cudaStreamCaptureStatusNone) return make();
  using Key = std::tuple<int, int, int64_t, int>;
  static std::mutex mutex;
  static auto* rows = new std::map<Key, at::Tensor>();
  const Key key{int(x.device().index()), int(x.scalar_type()), N, value};
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = rows->find(key);
  if (it != rows->end()) return it->second;
  at::Tensor row = make();
  stream.synchronize();  // filled before any other stream reads it
  rows->emplace(key, row);
  return row;
}

inline at::Tensor cuda_param(const std::optional<at::Tensor>& p, const at::Tensor& x, int64_t N, int value) {
  if (!defined(p)) return constant_row(x, N, value);
  return p->scalar_type() == x.scalar_type() ? p->contiguous() : p->to(x.scalar_type()).contiguous();
}
#endif

inline std::optional<at::Tensor> opt(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

}  // namespace norm_ops
