// kernels/half_dispatch/half_dispatch.cpp: the PyTorch side of lesson 05's third exercise, float16 in an op's
// dispatch (kernels/exercises/half_dispatch.cuh): a pybind module, not a registered op, that runs the
// learner's code.
//
//   forward(x, sum_in_dtype=False) -> ms   the mean of the squares of each row of x (its last dimension),
//                                          float32 (float64 for float64 x), with x's leading shape; summed
//                                          in the type the exercise's dispatch() gives, or with
//                                          sum_in_dtype=True in x's own dtype (what breaks without float)
//
// On the CPU the rows go through half_dispatch_cpu (the exercise's loop), on a GPU through half_dispatch_v1
// (one warp per row); both call the exercise's dispatch(), and a dtype it has no case for is a TypeError
// ("Half not dispatched"). This file passes x's dtype as a DType and its data as raw bytes: it includes no
// exercise file, so an edit to one recompiles only the torch-free parts.
#include "half_dispatch.h"

#include <ATen/Parallel.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <algorithm>
#include <atomic>
#include <limits>
#include <string>

#include "common/checks.h"

namespace {

DType dtype_of(const at::Tensor& x) {
  switch (x.scalar_type()) {
    case at::kFloat:
      return DType::Float32;
    case at::kDouble:
      return DType::Float64;
    case at::kHalf:
      return DType::Float16;
    default:
      return DType::BFloat16;  // check_floating let only these four through
  }
}

const char* dispatch_name(const at::Tensor& x) {
  switch (x.scalar_type()) {
    case at::kFloat:
      return "Float (DType::Float32)";
    case at::kDouble:
      return "Double (DType::Float64)";
    case at::kHalf:
      return "Half (DType::Float16)";
    default:
      return "BFloat16 (DType::BFloat16)";
  }
}

}  // namespace

at::Tensor forward(const at::Tensor& x_in, bool sum_in_dtype) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  check_not_0d(x_in, "x");
  const int64_t N = x_in.size(-1);
  TORCH_CHECK_VALUE(N <= std::numeric_limits<int>::max(), "x's last dimension must be below 2^31, got ",
                    std::to_string(N));
  const at::Tensor x = x_in.contiguous();
  const int64_t M = N == 0 ? 0 : x.numel() / N;
  at::Tensor out = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(acc_dtype(x)));
  if (N == 0) return out.fill_(std::numeric_limits<double>::quiet_NaN());  // the mean of nothing, as torch's
  const DType dtype = dtype_of(x);
  std::atomic<bool> dispatched{true};
  if (x.is_cpu()) {
    const int64_t grain = std::max<int64_t>(1, 32768 / N);
    at::parallel_for(0, M, grain, [&](int64_t begin, int64_t end) {
      if (!half_dispatch_cpu(dtype, x.data_ptr(), out.data_ptr(), begin, end, N, sum_in_dtype))
        dispatched = false;
    });
  } else {
#ifdef WITH_CUDA
    const OnDevice on(x);
    dispatched = half_dispatch_v1(dtype, x.data_ptr(), out.data_ptr(), M, static_cast<int>(N), sum_in_dtype,
                                  on.stream);
#endif
  }
  TORCH_CHECK_TYPE(
      dispatched.load(), dispatch_name(x),
      " not dispatched: dispatch() in kernels/exercises/half_dispatch.cuh has no case for x's dtype, ",
      x.scalar_type(), " (add one that calls body(T{}, A{}) with its storage and sum types)");
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The mean of squares per row by lesson 05's third exercise (kernels/exercises/half_dispatch.cuh)";
  m.def(
      "forward", &forward,
      "the mean of the squares of each row of x, float32 (float64 for float64 x); sum_in_dtype=True sums in "
      "x's own dtype",
      py::arg("x"), py::arg("sum_in_dtype") = false);
}
