// kernels/square/square.cpp: the course's side of the square op, y = x * x, beside lesson 02b's exercise
// (the glue, the C++ autograd Function and the binding: kernels/exercises/square_glue.h, compiled by
// square.glue.cpp).
//
//   square_forward_cpu / square_backward_cpu   the CPU loops square.h declares, for the four dtypes
//   square_kernel(x) -> y                       lesson 04: the kernels torch.library's course::square and
//   square_backward_kernel(grad_y, x) -> grad_x  course::square_backward run (square.library.cpp names them)
//
// Lesson 04's kernels have glue of their own here, the same checks and dispatch as the exercise asks for, so
// that the registered ops work whatever state lesson 02b's exercise is in (a stub binds nothing).
#include "square.h"

#include "common/checks.h"

namespace {
constexpr int64_t kGrain = 32768;  // elements per CPU task
}

// The CPU loops, computed in at::opmath_type (float for float16/bfloat16) and rounded once.
template <typename T>
void square_forward_cpu(const T* x, T* y, int64_t n) {
  using acc_t = at::opmath_type<T>;
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = static_cast<T>(acc_t(x[i]) * acc_t(x[i]));
  });
}

template <typename T>
void square_backward_cpu(const T* grad_y, const T* x, T* grad_x, int64_t n) {
  using acc_t = at::opmath_type<T>;
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) grad_x[i] = static_cast<T>(2 * acc_t(x[i]) * acc_t(grad_y[i]));
  });
}

#define INSTANTIATE(T)                                        \
  template void square_forward_cpu<T>(const T*, T*, int64_t); \
  template void square_backward_cpu<T>(const T*, const T*, T*, int64_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(at::Half)
INSTANTIATE(at::BFloat16)
#undef INSTANTIATE

at::Tensor square_kernel(const at::Tensor& x_in) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "square_kernel", [&] {
    if (x.is_cpu()) return square_forward_cpu(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel());
#ifdef WITH_CUDA
    const OnDevice on(x);
    square_forward_v2(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(y), x.numel(), on.stream);
#endif
  });
  return y;
}

at::Tensor square_backward_kernel(const at::Tensor& grad_y_in, const at::Tensor& x_in) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  check_like(grad_y_in, "grad_y", x_in, "x");
  check_same_dtype(grad_y_in, "grad_y", x_in, "x");
  const at::Tensor x = x_in.contiguous(), grad_y = grad_y_in.contiguous();
  at::Tensor grad_x = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "square_backward_kernel", [&] {
    if (x.is_cpu())
      return square_backward_cpu(grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(),
                                 grad_x.data_ptr<scalar_t>(), x.numel());
#ifdef WITH_CUDA
    const OnDevice on(x);
    square_backward_v2(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(grad_x),
                       x.numel(), on.stream);
#endif
  });
  return grad_x;
}
