// kernels/layernorm/layernorm.exercises.cu: the kernels of lesson 03 that run the learner's CUDA code (Part 2
// of kernels/exercises/layernorm_warp_reduce.cuh and layernorm_backward_row.cuh), and their launchers
// (declared in layernorm.h). No torch header here, so an exercise edit recompiles this file only.
//
//   forward v2   forward_v2_kernel, layernorm_forward_v2: one warp per row; lane l reads elements
//                l, l + 32, ... (32 neighbours = one coalesced transaction) and the lanes' partial sums
//                meet through warp_sum (your shuffles), no shared memory.
//   backward v1  backward_v1_dx_kernel, layernorm_backward_v1_dx: grad_x, one warp per row
//                (layernorm_backward_row_warp, yours). grad_weight and grad_bias are summed by the
//                given column kernel of layernorm.cu (layernorm_backward_v1 launches both).
#include "layernorm.h"
#include "layernorm_backward_row.cuh"
#include "layernorm_warp_reduce.cuh"

namespace {

__device__ __forceinline__ float rsqrt_of(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_of(double v) { return rsqrt(v); }

// v2: warp w of the grid owns row w; warp_sum (the exercise) joins the lanes' partial sums.
template <typename T>
__global__ void forward_v2_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                  T* __restrict__ y, Acc<T>* __restrict__ mean, Acc<T>* __restrict__ rstd,
                                  int64_t M, int N, Acc<T> eps) {
  using acc_t = Acc<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  if (row >= M) return;  // the whole warp leaves together
  const T* xr = x + row * N;
  T* yr = y + row * N;
  acc_t sum = 0;
  for (int j = lane; j < N; j += 32) sum += to_acc(xr[j]);
  const acc_t mu = warp_sum(sum) / N;
  acc_t sq = 0;
  for (int j = lane; j < N; j += 32) {
    const acc_t d = to_acc(xr[j]) - mu;
    sq += d * d;
  }
  const acc_t rs = rsqrt_of(warp_sum(sq) / N + eps);
  for (int j = lane; j < N; j += 32)
    yr[j] = from_acc<T>((to_acc(xr[j]) - mu) * rs * to_acc(w[j]) + to_acc(b[j]));
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// backward v1 grad_x: warp w of the grid owns row w (layernorm_backward_row_warp, the exercise).
template <typename T>
__global__ void backward_v1_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      const Acc<T>* __restrict__ mean, const Acc<T>* __restrict__ rstd,
                                      const T* __restrict__ w, T* __restrict__ dx, int64_t M, int N) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  if (row >= M) return;  // the whole warp leaves together
  layernorm_backward_row_warp<T>(dy + row * N, x + row * N, w, mean[row], rstd[row], N, threadIdx.x % 32,
                                 dx + row * N);
}

constexpr int kThreads = 256;  // 8 rows per block

}  // namespace

template <typename T>
void layernorm_forward_v2(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                          int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  forward_v2_kernel<T><<<ceil_div<int64_t>(M, kThreads / 32), kThreads, 0, stream>>>(x, weight, bias, y, mean,
                                                                                     rstd, M, N, eps);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void layernorm_backward_v1_dx(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                              const T* weight, T* grad_x, int64_t M, int N, cudaStream_t stream) {
  backward_v1_dx_kernel<T><<<ceil_div<int64_t>(M, kThreads / 32), kThreads, 0, stream>>>(
      grad_y, x, mean, rstd, weight, grad_x, M, N);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T)                                                                                      \
  template void layernorm_forward_v2<T>(const T*, const T*, const T*, T*, Acc<T>*, Acc<T>*, int64_t, int,   \
                                        Acc<T>, cudaStream_t);                                              \
  template void layernorm_backward_v1_dx<T>(const T*, const T*, const Acc<T>*, const Acc<T>*, const T*, T*, \
                                            int64_t, int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
