// kernels/debugging/debugging.exercises.cu: lesson 07's exercises, CUDA parts (Part 2 of
// kernels/exercises/debug_row_sum.cuh and debug_scale.cuh), and their launchers (the course's: one block per
// row; ceil(n / 4) threads). No torch headers: an edit rebuilds this file alone.
#include "common/common.h"
#include "debug_row_sum.cuh"
#include "debug_scale.cuh"
#include "debugging.h"

void row_sum(const float* x, float* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  row_sum_kernel<<<rows, kRowSumThreads, 0, stream>>>(x, out, cols);
  COURSE_LAUNCH_CHECK();
}

void scale_shift(const float* x, float* y, int64_t n, float a, float b, cudaStream_t stream) {
  const int64_t threads = ceil_div<int64_t>(n, 4);
  scale_shift_kernel<<<ceil_div<int64_t>(threads, kScaleThreads), kScaleThreads, 0, stream>>>(x, y, n, a, b);
  COURSE_LAUNCH_CHECK();
}
