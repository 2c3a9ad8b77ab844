// swiglu.cpp: the PyTorch side of course::swiglu (lesson 08's capstone: the answer). y = silu(gate) * up,
// where gate and up are the two halves of x's last dimension, as a LLaMA-style MLP computes it from one
// matmul's output.
//
//   course::swiglu(Tensor x) -> Tensor                         x [..., 2h] -> y [..., h]
//   course::swiglu_backward(Tensor grad_y, Tensor x) -> Tensor grad_y [..., h], x [..., 2h] -> grad_x [...,
//   2h]
//
// This file checks the inputs (an error names the argument), makes them contiguous, allocates the output,
// picks the dtype and runs the CPU loops (swiglu.cpu.cpp, over threads) or the CUDA launchers (swiglu.cu) on
// PyTorch's current stream; then registers both functions as the ops' CPU and CUDA kernels. swiglu.py
// registers the rest: the fake kernels, the autograd formula and the autocast rule.
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: makes the library importable as a Python module

#include <algorithm>
#include <vector>

#include "common/checks.h"
#include "common/library.h"
#include "swiglu_cpu.h"
#ifdef WITH_CUDA
#include "swiglu.h"
#endif

// The dtypes the op takes: float32, float16 and bfloat16 (the math in float), and float64 (for gradcheck).
#define SWIGLU_DISPATCH(TYPE, NAME, ...)                                                                  \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                                                          \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__) AT_DISPATCH_CASE(at::kDouble, __VA_ARGS__) \
                         AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)                                         \
                             AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

namespace {

constexpr int64_t kGrain = 32768;  // values per CPU task: smaller tasks cost more to hand out than they take

// Rows per CPU task, for rows of h outputs (3h values moved forward, 5h backward: about the same per row).
int64_t grain_rows(int64_t h) { return std::max<int64_t>(1, kGrain / (3 * h)); }

void check_x(const at::Tensor& x) {
  check_floating(x, "x");
  check_cuda_built(x, "x");
  check_not_0d(x, "x");
  TORCH_CHECK_VALUE(
      x.size(-1) % 2 == 0,
      "x's last dimension holds gate and up, its two halves, so it must be even; got x of shape ",
      shape_str(x.sizes()));
}

// [..., 2h] -> [..., h]
std::vector<int64_t> half_shape(const at::Tensor& x) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() /= 2;
  return shape;
}

}  // namespace

at::Tensor swiglu_kernel(const at::Tensor& x_in) {
  check_x(x_in);
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty(half_shape(x), x.options());
  if (y.numel() == 0) return y;  // also h == 0: nothing to compute, and no launch of 0 blocks
  const int64_t h = y.size(-1), rows = y.numel() / h;
  SWIGLU_DISPATCH(x.scalar_type(), "swiglu", [&] {
    if (x.is_cpu()) {
      at::parallel_for(0, rows, grain_rows(h), [&](int64_t begin, int64_t end) {
        swiglu_forward_cpu(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), begin, end, h);
      });
      return;
    }
#ifdef WITH_CUDA
    const OnDevice on(x);
    swiglu_forward_cuda(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(y), rows, h, on.stream);
#endif
  });
  return y;
}

at::Tensor swiglu_backward_kernel(const at::Tensor& grad_y_in, const at::Tensor& x_in) {
  check_x(x_in);
  check_defined(grad_y_in, "grad_y");
  check_same_device(grad_y_in, "grad_y", x_in, "x");
  check_same_dtype(grad_y_in, "grad_y", x_in, "x");
  check_shape(grad_y_in, "grad_y", half_shape(x_in));
  const at::Tensor x = x_in.contiguous(), grad_y = grad_y_in.contiguous();
  at::Tensor grad_x = at::empty_like(x);
  if (grad_y.numel() == 0) return grad_x.zero_();  // h == 0 leaves nothing; rows == 0 is already empty
  const int64_t h = grad_y.size(-1), rows = grad_y.numel() / h;
  SWIGLU_DISPATCH(x.scalar_type(), "swiglu_backward", [&] {
    if (x.is_cpu()) {
      at::parallel_for(0, rows, grain_rows(h), [&](int64_t begin, int64_t end) {
        swiglu_backward_cpu(grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(),
                            begin, end, h);
      });
      return;
    }
#ifdef WITH_CUDA
    const OnDevice on(x);
    swiglu_backward_cuda(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(grad_x), rows,
                         h, on.stream);
#endif
  });
  return grad_x;
}

// The schemas, and the functions above as the CPU and CUDA kernels (common/library.h: define() lets a rebuilt
// op load again into the same process).
COURSE_LIBRARY(m) {
  define(m, "swiglu(Tensor x) -> Tensor");
  define(m, "swiglu_backward(Tensor grad_y, Tensor x) -> Tensor");
}

COURSE_IMPL_CPU_CUDA(m) {
  m.impl("swiglu", &swiglu_kernel);
  m.impl("swiglu_backward", &swiglu_backward_kernel);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "course::swiglu and course::swiglu_backward (torch.ops.course.swiglu): loading registers them";
}
