// kernels/fused_bias_relu/fused_bias_relu.exercises.cu: the launcher of Part 2 of your
// kernels/exercises/bias_grad.cuh (backward v4's grad_bias: per-block partial sums, then their sum), for the
// four CUDA types. No torch headers: an edit recompiles only this file.
#include <algorithm>

#include "bias_grad.cuh"
#include "fused_bias_relu.h"

namespace {

// Rows per tile: 256 rows of 32 columns is 16 rows per thread, enough loads in flight per thread, and a
// 4096 x 4096 tensor makes 128 x 16 = 2048 blocks, several per SM. At most kMaxParts tiles (the grid's y
// dimension stops at 65535, and pass 2 adds `parts` values per column): longer columns get longer tiles.
constexpr int64_t kTileRows = 256;
constexpr int64_t kMaxParts = 1024;

int64_t rows_per_block(int64_t rows) { return std::max(kTileRows, ceil_div<int64_t>(rows, kMaxParts)); }

}  // namespace

int64_t fbr_bias_grad_v4_parts(int64_t rows) { return ceil_div<int64_t>(rows, rows_per_block(rows)); }

template <typename T>
void fbr_bias_grad_v4(const T* grad_y, const T* y, Acc<T>* partials, T* grad_bias, int64_t rows, int64_t cols,
                      cudaStream_t stream) {
  const int64_t parts = fbr_bias_grad_v4_parts(rows);
  const dim3 grid(unsigned(ceil_div<int64_t>(cols, kBiasGradCols)), unsigned(parts));
  bias_grad_partials_kernel<T><<<grid, dim3(kBiasGradCols, kBiasGradLanes), 0, stream>>>(
      grad_y, y, partials, rows, cols, rows_per_block(rows));
  COURSE_LAUNCH_CHECK();
  constexpr int kThreads = 256;
  bias_grad_finish_kernel<T>
      <<<ceil_div<int64_t>(cols, kThreads), kThreads, 0, stream>>>(partials, parts, grad_bias, cols);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T) \
  template void fbr_bias_grad_v4<T>(const T*, const T*, Acc<T>*, T*, int64_t, int64_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
