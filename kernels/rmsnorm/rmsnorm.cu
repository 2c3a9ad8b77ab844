// kernels/rmsnorm/rmsnorm.cu: RMSNorm over the last dimension, forward and backward (lesson 05).
//
//   y = x * rstd * weight,   rstd = 1 / sqrt(mean(x^2) + eps),  per row of N.
//
// LayerNorm (lesson 03) without the mean and without the bias: one row sum instead of two in forward, and
// in backward grad_x = rstd * (g - xhat * mean(g * xhat)) with g = grad_y * weight, xhat = x * rstd (no
// mean(g) term), grad_weight = sum over rows of grad_y * xhat (no grad_bias). The bytes are a norm's:
// 2*M*N elements forward, 3*M*N backward, so the speed limit is again a copy. The versions (launchers in
// rmsnorm.h):
//
//   forward v1   forward_v1_kernel, rmsnorm_forward_v1: one thread per row, two passes over the row. The
//                simplest correct kernel; slow for lesson 03's reasons (M threads, loads N elements apart).
//   forward v2   the norm engine's forward (kernels/norm_engine/, Norm::kRms; engine.cuh's table says which
//                kernel runs for which shape), rmsnorm_forward_v2: lesson 03's forward v3 for RMSNorm
//                (forward_kernel: the row in registers as 16-byte packs, a row group of 1 to 32 warps per
//                row, one group sum of squares instead of two; float rows load their weights with the row:
//                1 x 4096 6.3 -> 5.0 us); rows too long for registers one block per row (forward_long_kernel)
//                or on sm_90 a cluster of 2-8 blocks whose shared memory holds the row together; on sm_90
//                forward_bulk_kernel where it is faster: rows by bulk copy into a ring of shared-memory
//                stages, two rows always in flight (bf16 512 x 32768 79 -> 96 % of a copy, float32
//                256 x 65536 81 -> 89 %, bf16 256 x 65536 89 -> 98 %).
//   backward v1  backward_v1_dx_kernel and backward_v1_dw_kernel, rmsnorm_backward_v1: one warp per row
//                for grad_x (two reads of the row; the formula spelled out, as the lesson derives it), one
//                thread per column for grad_weight.
//   backward v2  the engine's backward, rmsnorm_backward_v2: lesson 03's backward v2 (backward_kernel: one
//                pass, a persistent grid of row groups with the next row in flight, grad_weight summed per
//                block in shared memory, the blocks' partial rows added by sum_partials_kernel in a fixed
//                order: the same bits on every run). Longer rows: over a cluster of 2 blocks (float,
//                double), or on sm_90 backward_bulk_kernel (a cluster of 1-8 blocks per row, slices by bulk
//                copy, two rows in flight, x and grad_y read once: bf16 512 x 32768 66 -> 81-83 % of a
//                copy), elsewhere backward_long_rows_kernel + backward_long_cols_kernel (read twice). On
//                sm_90, batches of rows of one 16-byte pack per thread above 1 MiB take lesson 03b's
//                backward_v2_bulk_kernel<kRms> (norm_engine/rounds.cuh): rounds of whole rows by bulk copy,
//                three in flight per SM (bf16 73-78 -> 83-87 % of a copy).
//
// Unaligned pointers, or N not a multiple of the pack width, run the same kernels with one value per pack.
// Everything is computed in Acc<T> (float, double for double inputs) and stored as T.
#include "norm_engine/engine.cuh"
#include "rmsnorm.h"

using norm_engine::Norm;

namespace {

// v1: thread i owns row i: the sum of squares, then y.
template <typename T>
__global__ void forward_v1_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                  Acc<T>* __restrict__ rstd, int64_t M, int N, Acc<T> eps) {
  using acc_t = Acc<T>;
  const int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (row >= M) return;
  const T* xr = x + row * N;
  acc_t sq = 0;
  for (int j = 0; j < N; ++j) sq += to_acc(xr[j]) * to_acc(xr[j]);
  const acc_t rs = norm_engine::rsqrt_acc(sq / N + eps);
  for (int j = 0; j < N; ++j) y[row * N + j] = from_acc<T>(to_acc(xr[j]) * rs * to_acc(w[j]));
  rstd[row] = rs;
}

// v1 grad_x: one warp per row; lane l takes columns l, l + 32, ... (coalesced), reads the row twice.
template <typename T>
__global__ void backward_v1_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      const Acc<T>* __restrict__ rstd, const T* __restrict__ w,
                                      T* __restrict__ dx, int64_t M, int N) {
  using acc_t = Acc<T>;
  const int64_t row = blockIdx.x * int64_t(blockDim.y) + threadIdx.y;
  if (row >= M) return;  // the whole warp: the shuffles below stay full-warp
  const acc_t rs = rstd[row];
  acc_t s = 0;
  for (int j = threadIdx.x; j < N; j += 32)
    s += to_acc(dy[row * N + j]) * to_acc(w[j]) * to_acc(x[row * N + j]);
  s = norm_engine::lane_sum(s) * rs / N;  // mean(g * xhat)
  for (int j = threadIdx.x; j < N; j += 32) {
    const acc_t xh = to_acc(x[row * N + j]) * rs;
    // grad_x spelled out, as the lesson derives it (grad_x in norm_engine/grad.cuh elsewhere)
    dx[row * N + j] = from_acc<T>(rs * (to_acc(dy[row * N + j]) * to_acc(w[j]) - xh * s));
  }
}

// v1 grad_weight: thread j walks column j down all M rows.
template <typename T, typename P>
__global__ void backward_v1_dw_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      const Acc<T>* __restrict__ rstd, P* __restrict__ dw, int64_t M, int N) {
  using acc_t = Acc<T>;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= N) return;
  acc_t s = 0;
  for (int64_t r = 0; r < M; ++r) s += to_acc(dy[r * N + j]) * to_acc(x[r * N + j]) * rstd[r];
  if constexpr (std::is_same_v<P, T>)
    dw[j] = from_acc<T>(s);
  else
    dw[j] = static_cast<P>(s);
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Launchers. The .cpp guarantees M > 0, N > 0, and that every pointer is on the current device.
// ------------------------------------------------------------------------------------------------

template <typename T>
void rmsnorm_forward_v1(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                        cudaStream_t stream) {
  forward_v1_kernel<T>
      <<<unsigned(ceil_div<int64_t>(M, 128)), 128, 0, stream>>>(x, weight, y, rstd, M, N, eps);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void rmsnorm_forward_v2(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                        cudaStream_t stream) {
  norm_engine::launch_forward<T, Norm::kRms, false>(x, nullptr, weight, nullptr, y, nullptr, nullptr, rstd, M,
                                                    N, eps, stream);
}

template <typename T, typename P>
void rmsnorm_backward_v1(const T* grad_y, const T* x, const Acc<T>* rstd, const T* weight, T* grad_x,
                         P* grad_weight, int64_t M, int N, cudaStream_t stream) {
  backward_v1_dx_kernel<T>
      <<<unsigned(ceil_div<int64_t>(M, 4)), dim3(32, 4), 0, stream>>>(grad_y, x, rstd, weight, grad_x, M, N);
  COURSE_LAUNCH_CHECK();
  backward_v1_dw_kernel<T, P>
      <<<unsigned(ceil_div(N, 128)), 128, 0, stream>>>(grad_y, x, rstd, grad_weight, M, N);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
int64_t rmsnorm_backward_v2_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                      int64_t M, int N) {
  return norm_engine::backward_workspace<T, Norm::kRms>(grad_y, nullptr, x, weight, grad_x, M, N);
}

template <typename T, typename P>
void rmsnorm_backward_v2(const T* grad_y, const T* x, const Acc<T>* rstd, const T* weight, T* grad_x,
                         P* grad_weight, Acc<T>* workspace, int64_t M, int N, cudaStream_t stream) {
  norm_engine::launch_backward<T, Norm::kRms, P>(grad_y, nullptr, x, nullptr, rstd, weight, grad_x,
                                                 grad_weight, static_cast<P*>(nullptr), workspace, M, N,
                                                 stream);
}

#define INSTANTIATE(T)                                                                                      \
  template void rmsnorm_forward_v1<T>(const T*, const T*, T*, Acc<T>*, int64_t, int, Acc<T>, cudaStream_t); \
  template void rmsnorm_forward_v2<T>(const T*, const T*, T*, Acc<T>*, int64_t, int, Acc<T>, cudaStream_t); \
  template int64_t rmsnorm_backward_v2_workspace<T>(const T*, const T*, const T*, const T*, int64_t, int);
#define INSTANTIATE_BACKWARD(T, P)                                                                           \
  template void rmsnorm_backward_v1<T, P>(const T*, const T*, const Acc<T>*, const T*, T*, P*, int64_t, int, \
                                          cudaStream_t);                                                     \
  template void rmsnorm_backward_v2<T, P>(const T*, const T*, const Acc<T>*, const T*, T*, P*, Acc<T>*,      \
                                          int64_t, int, cudaStream_t);
COURSE_FOR_EACH_DTYPE(INSTANTIATE)
COURSE_FOR_EACH_PARAM_PAIR(INSTANTIATE_BACKWARD)
