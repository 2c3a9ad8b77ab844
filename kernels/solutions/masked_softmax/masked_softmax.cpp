// masked_softmax.cpp: the PyTorch side of course::masked_softmax (lesson 09, the practice set: the answer).
// Attention's softmax with its masks fused: y = softmax(scale * x + mask) over the last dimension of the
// scores x [..., Lq, Lk], the mask -inf where `causal` (key j > query i, as scaled_dot_product_attention's
// is_causal) or key_padding_mask [B, Lk] (True = keep; B = x.size(0)) masks the key. A row with no key kept
// gives zeros.
//
//   course::masked_softmax(Tensor x, Tensor? key_padding_mask, float scale, bool causal) -> Tensor
//   course::masked_softmax_backward(Tensor grad_y, Tensor y, float scale) -> Tensor
//
// This file checks the inputs (an error names the argument), makes them contiguous, allocates the output,
// picks the dtype and runs the CPU loops (masked_softmax.cpu.cpp, over threads) or the CUDA launchers
// (masked_softmax.cu) on PyTorch's current stream; then registers both functions as the ops' CPU and CUDA
// kernels. masked_softmax.py registers the rest: the fake kernels and the autograd formula.
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: makes the library importable as a Python module

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "common/checks.h"
#include "common/library.h"
#include "masked_softmax_cpu.h"
#ifdef WITH_CUDA
#include "masked_softmax.h"
#endif

// The dtypes the op takes: float32, float16 and bfloat16 (the math in float), and float64 (for gradcheck).
#define MASKED_SOFTMAX_DISPATCH(TYPE, NAME, ...)                                                          \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                                                          \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__) AT_DISPATCH_CASE(at::kDouble, __VA_ARGS__) \
                         AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)                                         \
                             AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

namespace {

constexpr int64_t kGrain = 32768;  // values per CPU task: smaller tasks cost more to hand out than they take

int64_t grain_rows(int64_t Lk) { return std::max<int64_t>(1, kGrain / Lk); }

void check_scale(double scale) {
  TORCH_CHECK_VALUE(std::isfinite(scale), "scale must be a finite number, got ", std::to_string(scale));
}

// The rows of x [..., Lk] and the masks' inputs (masked_softmax_rows.h); the mask's checks name it.
SoftmaxRows check_rows(const at::Tensor& x, const at::Tensor& mask, bool causal) {
  check_floating(x, "x");
  check_cuda_built(x, "x");
  check_not_0d(x, "x");
  TORCH_CHECK_VALUE(
      !causal || x.dim() >= 2,
      "causal=True needs x of shape [..., Lq, Lk] (the queries are its second-to-last dimension); got "
      "x of shape ",
      shape_str(x.sizes()));
  SoftmaxRows s;
  s.Lk = x.size(-1);
  s.rows = s.Lk == 0 ? 0 : x.numel() / s.Lk;
  s.causal = causal;
  s.Lq = x.dim() >= 2 ? x.size(-2) : 1;
  s.rows_per_batch = std::max<int64_t>(s.rows, 1);
  if (mask.defined()) {
    TORCH_CHECK_VALUE(x.dim() >= 2,
                      "key_padding_mask [B, Lk] needs x of shape [B, ..., Lk] (at least 2 dimensions); ",
                      "got x of shape ", shape_str(x.sizes()));
    check_same_device(mask, "key_padding_mask", x, "x");
    TORCH_CHECK_TYPE(mask.scalar_type() == at::kBool,
                     "key_padding_mask must be a bool tensor (True = keep the key), got ",
                     mask.scalar_type());
    check_shape(mask, "key_padding_mask", {x.size(0), s.Lk});
    s.rows_per_batch = x.size(0) == 0 ? 1 : std::max<int64_t>(s.rows / x.size(0), 1);
  }
  return s;
}

}  // namespace

at::Tensor masked_softmax_kernel(const at::Tensor& x_in, const std::optional<at::Tensor>& mask_in,
                                 double scale, bool causal) {
  const at::Tensor mask_arg = mask_in.has_value() ? *mask_in : at::Tensor();
  SoftmaxRows s = check_rows(x_in, mask_arg, causal);
  check_scale(scale);
  const at::Tensor x = x_in.contiguous();
  const at::Tensor mask = mask_arg.defined() ? mask_arg.contiguous() : mask_arg;
  at::Tensor y = at::empty(x.sizes(), x.options());
  if (y.numel() == 0) return y;  // also Lk == 0: nothing to compute, and no launch of 0 blocks
  s.keep = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  MASKED_SOFTMAX_DISPATCH(x.scalar_type(), "masked_softmax", [&] {
    if (x.is_cpu()) {
      at::parallel_for(0, s.rows, grain_rows(s.Lk), [&](int64_t begin, int64_t end) {
        masked_softmax_forward_cpu(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), s, scale, begin, end);
      });
      return;
    }
#ifdef WITH_CUDA
    const OnDevice on(x);
    masked_softmax_forward_cuda(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(y), s, scale, on.stream);
#endif
  });
  return y;
}

at::Tensor masked_softmax_backward_kernel(const at::Tensor& grad_y_in, const at::Tensor& y_in, double scale) {
  check_floating(y_in, "y");
  check_cuda_built(y_in, "y");
  check_not_0d(y_in, "y");
  check_defined(grad_y_in, "grad_y");
  check_same_device(grad_y_in, "grad_y", y_in, "y");
  check_same_dtype(grad_y_in, "grad_y", y_in, "y");
  check_shape(grad_y_in, "grad_y", y_in.sizes());
  check_scale(scale);
  const at::Tensor y = y_in.contiguous(), grad_y = grad_y_in.contiguous();
  at::Tensor grad_x = at::empty(y.sizes(), y.options());
  if (grad_x.numel() == 0) return grad_x;
  const int64_t Lk = y.size(-1), rows = y.numel() / Lk;
  MASKED_SOFTMAX_DISPATCH(y.scalar_type(), "masked_softmax_backward", [&] {
    if (y.is_cpu()) {
      at::parallel_for(0, rows, grain_rows(Lk), [&](int64_t begin, int64_t end) {
        masked_softmax_backward_cpu(grad_y.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                    grad_x.data_ptr<scalar_t>(), Lk, scale, begin, end);
      });
      return;
    }
#ifdef WITH_CUDA
    const OnDevice on(y);
    masked_softmax_backward_cuda(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(y),
                                 cuda_ptr<scalar_t>(grad_x), rows, Lk, scale, on.stream);
#endif
  });
  return grad_x;
}

// The schemas, and the functions above as the CPU and CUDA kernels (common/library.h: define() lets a rebuilt
// op load again into the same process).
COURSE_LIBRARY(m) {
  define(m, "masked_softmax(Tensor x, Tensor? key_padding_mask, float scale, bool causal) -> Tensor");
  define(m, "masked_softmax_backward(Tensor grad_y, Tensor y, float scale) -> Tensor");
}

COURSE_IMPL_CPU_CUDA(m) {
  m.impl("masked_softmax", &masked_softmax_kernel);
  m.impl("masked_softmax_backward", &masked_softmax_backward_kernel);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() =
      "course::masked_softmax and course::masked_softmax_backward (torch.ops.course.*): loading registers "
      "them";
}
