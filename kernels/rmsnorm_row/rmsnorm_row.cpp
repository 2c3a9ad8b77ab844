// kernels/rmsnorm_row/rmsnorm_row.cpp: the PyTorch side of lesson 05's first exercise, RMSNorm backward of
// one row (kernels/exercises/rmsnorm_row.cuh): a pybind module, not a registered op, that runs the course's
// forward row (rmsnorm_row_forward.cuh) and the learner's backward row.
//
//   forward(x, weight=None, eps=1e-6) -> [y, rstd]    y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps)
//                                                     per row (float32, float64 for float64 x), x's leading
//                                                     shape
//   backward(grad_y, x, rstd, weight=None, grad_x=None) -> grad_x    the gradient of x for that forward;
//                                                     grad_x given: written in place (contiguous, x's shape,
//                                                     dtype and device) and returned
//
// Over x's last dimension N; weight [N] with x's dtype and device, or None (ones). On the CPU every row goes
// through the float/double row functions (float16 and bfloat16 rows through float, their math type), on a
// GPU through one warp per row (the forward's kernel, and Part 2's). grad_weight, a sum over the rows, is not
// the exercise: the finished op torch.ops.course.rms_norm (kernels/rmsnorm/rmsnorm.cpp) computes both.
#include "rmsnorm_row.h"

#include <ATen/Parallel.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/checks.h"

namespace {

// x's last dimension; checks shared by forward and backward. Returns N.
int64_t check_x(const at::Tensor& x, const std::optional<at::Tensor>& weight) {
  check_floating(x, "x");
  check_cuda_built(x, "x");
  check_not_0d(x, "x");
  const int64_t N = x.size(-1);
  TORCH_CHECK_VALUE(N <= std::numeric_limits<int>::max(), "x's last dimension must be below 2^31, got ",
                    std::to_string(N));
  if (weight.has_value() && weight->defined()) {
    check_same_device(*weight, "weight", x, "x");
    check_same_dtype(*weight, "weight", x, "x");
    check_shape(*weight, "weight", {N});
  }
  return N;
}

// weight in `dtype`, contiguous; ones for None (RMSNorm without a weight).
at::Tensor weight_or_ones(const std::optional<at::Tensor>& weight, int64_t N,
                          const at::TensorOptions& options) {
  if (weight.has_value() && weight->defined()) return weight->to(options.dtype()).contiguous();
  return at::ones({N}, options);
}

// A row loop over the CPU threads: about 32K elements per task.
template <typename F>
void for_rows(int64_t M, int64_t N, const F& f) {
  at::parallel_for(0, M, std::max<int64_t>(1, 32768 / std::max<int64_t>(N, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) f(r);
                   });
}

}  // namespace

std::vector<at::Tensor> forward(const at::Tensor& x_in, const std::optional<at::Tensor>& weight, double eps) {
  const int64_t N = check_x(x_in, weight);
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0, "eps must be a finite number >= 0, got ",
                    std::to_string(eps));
  const at::Tensor x = x_in.contiguous();
  const int64_t M = N == 0 ? 0 : x.numel() / N;
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(acc_dtype(x)));
  if (x.numel() == 0) return {y, rstd.fill_(1.0 / std::sqrt(eps))};
  if (x.is_cpu()) {  // float16/bfloat16 through float: their math type, as on the GPU
    const at::Tensor xa = x.to(acc_dtype(x)), w = weight_or_ones(weight, N, xa.options());
    at::Tensor ya = at::empty_like(xa);
    AT_DISPATCH_FLOATING_TYPES(xa.scalar_type(), "rmsnorm_row_forward", [&] {
      const scalar_t *xp = xa.data_ptr<scalar_t>(), *wp = w.data_ptr<scalar_t>();
      scalar_t *yp = ya.data_ptr<scalar_t>(), *rp = rstd.data_ptr<scalar_t>();
      for_rows(M, N, [&](int64_t r) {
        rmsnorm_row_forward_one(xp + r * N, wp, N, scalar_t(eps), yp + r * N, rp + r);
      });
    });
    return {y.copy_(ya), rstd};
  }
#ifdef WITH_CUDA
  const at::Tensor w = weight_or_ones(weight, N, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_row_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const OnDevice on(x);
    rmsnorm_row_forward_v1(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(w), cuda_ptr<scalar_t>(y),
                           rstd.data_ptr<acc_t>(), M, static_cast<int>(N), acc_t(eps), on.stream);
  });
#endif
  return {y, rstd};
}

at::Tensor backward(const at::Tensor& grad_y_in, const at::Tensor& x_in, const at::Tensor& rstd_in,
                    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& grad_x_out) {
  const int64_t N = check_x(x_in, weight);
  check_like(grad_y_in, "grad_y", x_in, "x");
  check_same_dtype(grad_y_in, "grad_y", x_in, "x");
  check_defined(rstd_in, "rstd");
  check_same_device(rstd_in, "rstd", x_in, "x");
  TORCH_CHECK_TYPE(rstd_in.scalar_type() == acc_dtype(x_in), "rstd must be ", acc_dtype(x_in),
                   " (what forward saves for x's dtype), got ", rstd_in.scalar_type());
  check_shape(rstd_in, "rstd", x_in.sizes().slice(0, x_in.dim() - 1));
  const bool in_place = grad_x_out.has_value() && grad_x_out->defined();
  if (in_place) {
    check_like(*grad_x_out, "grad_x", x_in, "x");
    check_same_dtype(*grad_x_out, "grad_x", x_in, "x");
    TORCH_CHECK_VALUE(grad_x_out->is_contiguous(), "grad_x must be contiguous (it is written in place)");
  }
  const at::Tensor grad_y = grad_y_in.contiguous(), x = x_in.contiguous(), rstd = rstd_in.contiguous();
  const int64_t M = N == 0 ? 0 : x.numel() / N;
  at::Tensor grad_x = in_place ? *grad_x_out : at::empty_like(x);
  if (x.numel() == 0) return grad_x;
  if (x.is_cpu()) {
    const at::Tensor gya = grad_y.to(acc_dtype(x)), xa = x.to(acc_dtype(x));
    const at::Tensor w = weight_or_ones(weight, N, xa.options());
    // Part 1 writes into grad_x itself where it is float/double and given (the self-check's guard around it
    // sees a write past the last row); otherwise into a float/double buffer one row longer than needed, so
    // that such a write stays inside memory this function owns.
    const bool direct = in_place && grad_x.scalar_type() == xa.scalar_type();
    at::Tensor out = direct ? grad_x : at::empty({x.numel() + N}, xa.options());
    AT_DISPATCH_FLOATING_TYPES(xa.scalar_type(), "rmsnorm_row_backward", [&] {
      const scalar_t *gp = gya.data_ptr<scalar_t>(), *xp = xa.data_ptr<scalar_t>(),
                     *wp = w.data_ptr<scalar_t>();
      const scalar_t* rp = rstd.data_ptr<scalar_t>();
      scalar_t* op = out.data_ptr<scalar_t>();
      for_rows(M, N, [&](int64_t r) {
        rmsnorm_backward_row_exercise(gp + r * N, xp + r * N, wp, rp[r], N, op + r * N);
      });
    });
    if (!direct) grad_x.copy_(out.narrow(0, 0, x.numel()).view(x.sizes()));
    return grad_x;
  }
#ifdef WITH_CUDA
  const at::Tensor w = weight_or_ones(weight, N, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_row_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const OnDevice on(x);
    rmsnorm_row_backward_v1(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(w),
                            rstd.data_ptr<acc_t>(), cuda_ptr<scalar_t>(grad_x), M, static_cast<int>(N),
                            on.stream);
  });
#endif
  return grad_x;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() =
      "RMSNorm forward (the course's row) and backward (lesson 05's first exercise, "
      "kernels/exercises/rmsnorm_row.cuh)";
  m.def("forward", &forward, "[y, rstd]: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) per row",
        py::arg("x"), py::arg("weight") = py::none(), py::arg("eps") = 1e-6);
  m.def("backward", &backward,
        "grad_x of RMSNorm from grad_y, x, the forward's rstd and weight (None: ones); into grad_x if given",
        py::arg("grad_y"), py::arg("x"), py::arg("rstd"), py::arg("weight") = py::none(),
        py::arg("grad_x") = py::none());
}
