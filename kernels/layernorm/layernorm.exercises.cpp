// kernels/layernorm/layernorm.exercises.cpp: the CPU parts (Part 1) of lesson 03's exercises, for float and
// double. No torch header here, so editing an exercise recompiles this file in about a second.
#include "layernorm_backward_row.cuh"
#include "layernorm_cpu.h"
#include "layernorm_warp_reduce.cuh"

void layernorm_exercise_row_stats(const float* x, int64_t n, float eps, float* mean, float* rstd) {
  layernorm_row_stats_cpu<float>(x, n, eps, mean, rstd);
}
void layernorm_exercise_row_stats(const double* x, int64_t n, double eps, double* mean, double* rstd) {
  layernorm_row_stats_cpu<double>(x, n, eps, mean, rstd);
}

void layernorm_exercise_backward_row(const float* grad_y, const float* x, const float* weight, float mean,
                                     float rstd, int64_t n, float* grad_x) {
  layernorm_backward_row_cpu<float>(grad_y, x, weight, mean, rstd, n, grad_x);
}
void layernorm_exercise_backward_row(const double* grad_y, const double* x, const double* weight, double mean,
                                     double rstd, int64_t n, double* grad_x) {
  layernorm_backward_row_cpu<double>(grad_y, x, weight, mean, rstd, n, grad_x);
}
