// kernels/debugging/debugging.exercises.cpp: lesson 07's exercises, CPU parts (Part 1 of
// kernels/exercises/debug_row_sum.cuh and debug_scale.cuh). No torch headers: an edit rebuilds this file in
// about a second.
#include "debugging.h"

#include "debug_row_sum.cuh"
#include "debug_scale.cuh"

void row_sum_cpu_part(const float* x, float* out, int64_t rows, int64_t cols) {
  row_sum_cpu(x, out, rows, cols);
}

void scale_shift_cpu_part(const float* x, float* y, int64_t n, float a, float b) {
  scale_shift_cpu(x, y, n, a, b);
}
