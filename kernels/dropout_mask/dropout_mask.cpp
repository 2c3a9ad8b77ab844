// kernels/dropout_mask/dropout_mask.cpp: the PyTorch side of lesson 05's second exercise, the dropout mask of
// a group of 4 elements (kernels/exercises/dropout_mask.cuh): a pybind module, not a registered op, that runs
// the learner's code.
//
//   forward(x, p, seed, offset) -> y   y = x / (1 - p) where element i (of x in row-major order) is kept,
//                                       0 where it is dropped: element i belongs to group i / 4, whose fate
//                                       dropout_group4 (the exercise) decides from (seed, offset)
//
// The same function runs on the CPU (a loop over the groups, in float or double: float16 and bfloat16
// through float, their math type) and on a GPU (dropout_mask_v1: one thread per group). Here seed and offset
// are arguments, so that a test can ask for any mask; course::dropout (kernels/dropout/dropout.cpp) draws
// them from PyTorch's generator and is what the lesson times this one against. p is not special-cased: p = 0
// and p = 1 run the exercise too.
#include "dropout_mask.h"

#include <ATen/Parallel.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <cmath>
#include <limits>

#include "common/checks.h"
#include "common/dropout_rng.h"  // check_dropout_p: course::dropout's wording

namespace {

template <typename T, typename acc_t>
void forward_cpu(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, double p) {
  at::parallel_for(0, (n + 3) / 4, 8192, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      acc_t in[4], out[4];
      for (int k = 0; k < 4; ++k) {
        in[k] = 4 * g + k < n ? static_cast<acc_t>(x[4 * g + k]) : acc_t(0);
        out[k] = std::numeric_limits<acc_t>::quiet_NaN();  // what an unfinished exercise leaves
      }
      dropout_mask_exercise(in, out, seed, offset, static_cast<uint64_t>(g), p);
      for (int k = 0; k < 4 && 4 * g + k < n; ++k) y[4 * g + k] = static_cast<T>(out[k]);
    }
  });
}

}  // namespace

at::Tensor forward(const at::Tensor& x_in, double p, int64_t seed, int64_t offset) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  check_dropout_p(p);
  TORCH_CHECK_VALUE(offset >= 0 && offset % 4 == 0, "offset must be a multiple of 4 and >= 0, got ",
                    std::to_string(offset));
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dropout_mask", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (x.is_cpu()) {
      forward_cpu<scalar_t, acc_t>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel(), uint64_t(seed),
                                   uint64_t(offset), p);
      return;
    }
#ifdef WITH_CUDA
    const OnDevice on(x);
    dropout_mask_v1(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(y), x.numel(), uint64_t(seed), uint64_t(offset),
                    p, on.stream);
#endif
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "dropout by lesson 05's second exercise (kernels/exercises/dropout_mask.cuh)";
  m.def("forward", &forward,
        "y = x / (1 - p) where kept, else 0: the mask of (seed, offset) by dropout_group4", py::arg("x"),
        py::arg("p"), py::arg("seed"), py::arg("offset") = 0);
}
