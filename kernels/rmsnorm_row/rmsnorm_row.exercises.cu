// kernels/rmsnorm_row/rmsnorm_row.exercises.cu: the GPU side of lesson 05's first exercise: the course's
// forward kernel, and the launcher of the learner's backward kernel (Part 2 of
// kernels/exercises/rmsnorm_row.cuh). Launchers declared in rmsnorm_row.h; no torch header here, so an
// exercise edit recompiles this file only.
//
//   forward v1   rmsnorm_row_forward_v1_kernel / rmsnorm_row_forward_v1: one warp per row, 8 rows per block
//                of 256 threads (rmsnorm_row_forward_warp in rmsnorm_row_forward.cuh: lane l reads elements
//                l, l + 32, ..., and the lanes' sums of squares meet through shuffles). The course's
//                forward v2 (kernels/rmsnorm/rmsnorm.cu) adds 16-byte loads and more warps per wide row.
//   backward v1  rmsnorm_backward_row_kernel / rmsnorm_row_backward_v1: the exercise (grad_x only, one warp
//                per row, the same 8 rows per block; kernels/exercises/rmsnorm_row.cuh). The course's
//                backward v2 (kernels/rmsnorm/rmsnorm.cu) reads the row once and sums grad_weight in the same
//                pass.
#include "rmsnorm_row.cuh"
#include "rmsnorm_row.h"
#include "rmsnorm_row_forward.cuh"

namespace {

constexpr int kThreads = 256;  // 8 warps: 8 rows per block

// forward v1: warp w of the grid owns row w (int64_t: row * N passes 2^31 in a large tensor).
template <typename T>
__global__ void rmsnorm_row_forward_v1_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                              T* __restrict__ y, Acc<T>* __restrict__ rstd, int64_t M, int N,
                                              Acc<T> eps) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  if (row >= M) return;  // the whole warp leaves together
  rmsnorm_row_forward_warp<T>(x + row * N, w, N, eps, threadIdx.x % 32, y + row * N, rstd + row);
}

}  // namespace

template <typename T>
void rmsnorm_row_forward_v1(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                            cudaStream_t stream) {
  rmsnorm_row_forward_v1_kernel<T>
      <<<ceil_div<int64_t>(M, kThreads / 32), kThreads, 0, stream>>>(x, weight, y, rstd, M, N, eps);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void rmsnorm_row_backward_v1(const T* grad_y, const T* x, const T* weight, const Acc<T>* rstd, T* grad_x,
                             int64_t M, int N, cudaStream_t stream) {
  rmsnorm_backward_row_kernel<T>
      <<<ceil_div<int64_t>(M, kThreads / 32), kThreads, 0, stream>>>(grad_y, x, weight, rstd, grad_x, M, N);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T)                                                                                    \
  template void rmsnorm_row_forward_v1<T>(const T*, const T*, T*, Acc<T>*, int64_t, int, Acc<T>,          \
                                          cudaStream_t);                                                  \
  template void rmsnorm_row_backward_v1<T>(const T*, const T*, const T*, const Acc<T>*, T*, int64_t, int, \
                                           cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
