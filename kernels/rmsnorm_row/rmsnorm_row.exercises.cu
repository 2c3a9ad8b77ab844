// kernels/rmsnorm_row/rmsnorm_row.exercises.cu: the kernel of lesson 05 that runs the learner's CUDA code
// (Part 2 of kernels/exercises/rmsnorm_row.cuh), and its launcher (declared in rmsnorm_row.h). No torch
// header here, so an exercise edit recompiles this file only.
//
//   v1  rmsnorm_row_v1_kernel, rmsnorm_row_v1: one warp per row, 8 rows per block of 256 threads; lane l
//       reads elements l, l + 32, ... (32 neighbours: one coalesced transaction per step) and the lanes'
//       partial sums meet through shuffles, no shared memory. The course's kernels
//       (kernels/rmsnorm/rmsnorm.cu) add vector loads and more warps per wide row.
#include "rmsnorm_row.cuh"
#include "rmsnorm_row.h"

namespace {

constexpr int kThreads = 256;  // 8 rows per block

// v1: warp w of the grid owns row w; rmsnorm_row_warp (the exercise) does the rest.
template <typename T>
__global__ void rmsnorm_row_v1_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                      Acc<T>* __restrict__ rstd, int64_t M, int N, Acc<T> eps) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  if (row >= M) return;  // the whole warp leaves together
  rmsnorm_row_warp<T>(x + row * N, w, N, eps, threadIdx.x % 32, y + row * N, rstd + row);
}

}  // namespace

template <typename T>
void rmsnorm_row_v1(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                    cudaStream_t stream) {
  if (M == 0) return;
  rmsnorm_row_v1_kernel<T>
      <<<ceil_div<int64_t>(M, kThreads / 32), kThreads, 0, stream>>>(x, weight, y, rstd, M, N, eps);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T) \
  template void rmsnorm_row_v1<T>(const T*, const T*, T*, Acc<T>*, int64_t, int, Acc<T>, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
