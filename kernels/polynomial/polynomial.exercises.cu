// kernels/polynomial/polynomial.exercises.cu: lesson 01's exercises, CUDA part: the launchers of forward v1
// and backward v1, whose kernels you write (Part 2 of kernels/exercises/polynomial_forward.cuh and
// polynomial_backward.cuh). No torch headers: editing an exercise recompiles only this file.
#include "polynomial.h"
#include "polynomial_backward.cuh"
#include "polynomial_forward.cuh"

namespace {
constexpr int kV1Threads = 256;  // threads per block: ceil_div(n, 256) blocks cover n elements
}  // namespace

template <typename T>
void poly_forward_v1(const T* x, const Acc<T>* coeffs, T* y, int64_t n, cudaStream_t stream) {
  poly_forward_v1_kernel<T><<<ceil_div<int64_t>(n, kV1Threads), kV1Threads, 0, stream>>>(x, coeffs, y, n);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void poly_backward_v1(const T* grad_y, const T* x, const Acc<T>* coeffs, T* grad_x, int64_t n,
                      cudaStream_t stream) {
  poly_backward_v1_kernel<T>
      <<<ceil_div<int64_t>(n, kV1Threads), kV1Threads, 0, stream>>>(grad_y, x, coeffs, grad_x, n);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE_V1(T)                                                               \
  template void poly_forward_v1<T>(const T*, const Acc<T>*, T*, int64_t, cudaStream_t); \
  template void poly_backward_v1<T>(const T*, const T*, const Acc<T>*, T*, int64_t, cudaStream_t);
INSTANTIATE_V1(float)
INSTANTIATE_V1(double)
INSTANTIATE_V1(__half)
INSTANTIATE_V1(__nv_bfloat16)
