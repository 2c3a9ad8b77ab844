// kernels/square/square.exercises.cu: the launchers of Part 2 of your kernels/exercises/square.cuh (square
// v1: one thread per element), for the four CUDA types. No torch headers: an edit recompiles only this file.
#include "square.cuh"
#include "square.h"

namespace {
constexpr int kThreads = 256;
}

template <typename T>
void square_forward_v1(const T* x, T* y, int64_t n, cudaStream_t stream) {
  square_forward_kernel<T><<<ceil_div<int64_t>(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void square_backward_v1(const T* grad_y, const T* x, T* grad_x, int64_t n, cudaStream_t stream) {
  square_backward_kernel<T><<<ceil_div<int64_t>(n, kThreads), kThreads, 0, stream>>>(grad_y, x, grad_x, n);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T)                                                     \
  template void square_forward_v1<T>(const T*, T*, int64_t, cudaStream_t); \
  template void square_backward_v1<T>(const T*, const T*, T*, int64_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
