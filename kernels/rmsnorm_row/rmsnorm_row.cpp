// kernels/rmsnorm_row/rmsnorm_row.cpp: the PyTorch side of lesson 05's first exercise, RMSNorm forward of one
// row (kernels/exercises/rmsnorm_row.cuh): a pybind module, not a registered op, that runs the learner's
// code.
//
//   forward(x, weight, eps=1e-6) -> [y, rstd]   RMSNorm over x's last dimension: y = x * rstd * weight,
//                                                rstd = 1 / sqrt(mean(x^2) + eps) per row (float32, float64
//                                                for float64 x), with x's leading shape
//
// On the CPU every row goes through Part 1 (rmsnorm_row_exercise: float or double; float16 and bfloat16 rows
// through float, their math type), on a GPU through Part 2 (rmsnorm_row_v1: one warp per row). x and weight
// share a dtype and a device; weight has shape [N]. The finished op is torch.ops.course.rms_norm
// (kernels/rmsnorm/rmsnorm.cpp), which the lesson times this one against.
#include "rmsnorm_row.h"

#include <ATen/Parallel.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/checks.h"

namespace {

template <typename T, typename acc_t>
void forward_cpu(const T* x, const T* w, T* y, acc_t* rstd, int64_t M, int64_t N, acc_t eps) {
  const std::vector<acc_t> wa(w, w + N);
  at::parallel_for(
      0, M, std::max<int64_t>(1, 32768 / std::max<int64_t>(N, 1)), [&](int64_t begin, int64_t end) {
        std::vector<acc_t> xa(N), ya(N);
        for (int64_t r = begin; r < end; ++r) {
          for (int64_t j = 0; j < N; ++j) xa[j] = static_cast<acc_t>(x[r * N + j]);
          std::fill(ya.begin(), ya.end(), std::numeric_limits<acc_t>::quiet_NaN());  // what a stub leaves
          rstd[r] = std::numeric_limits<acc_t>::quiet_NaN();
          rmsnorm_row_exercise(xa.data(), wa.data(), N, eps, ya.data(), rstd + r);
          for (int64_t j = 0; j < N; ++j) y[r * N + j] = static_cast<T>(ya[j]);
        }
      });
}

}  // namespace

std::vector<at::Tensor> forward(const at::Tensor& x_in, const at::Tensor& weight_in, double eps) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  check_not_0d(x_in, "x");
  check_defined(weight_in, "weight");
  check_same_device(weight_in, "weight", x_in, "x");
  check_same_dtype(weight_in, "weight", x_in, "x");
  const int64_t N = x_in.size(-1);
  check_shape(weight_in, "weight", {N});
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0, "eps must be a finite number >= 0, got ",
                    std::to_string(eps));
  TORCH_CHECK_VALUE(N <= std::numeric_limits<int>::max(), "x's last dimension must be below 2^31, got ",
                    std::to_string(N));
  const at::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  const int64_t M = N == 0 ? 0 : x.numel() / N;
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(acc_dtype(x)));
  if (x.numel() == 0) return {y, rstd.fill_(1.0 / std::sqrt(eps))};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_row", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (x.is_cpu()) {
      forward_cpu(x.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                  rstd.data_ptr<acc_t>(), M, N, acc_t(eps));
      return;
    }
#ifdef WITH_CUDA
    const OnDevice on(x);
    rmsnorm_row_v1(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(weight), cuda_ptr<scalar_t>(y),
                   rstd.data_ptr<acc_t>(), M, static_cast<int>(N), acc_t(eps), on.stream);
#endif
  });
  return {y, rstd};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "RMSNorm forward by lesson 05's first exercise (kernels/exercises/rmsnorm_row.cuh)";
  m.def("forward", &forward, "[y, rstd]: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) per row",
        py::arg("x"), py::arg("weight"), py::arg("eps") = 1e-6);
}
