// kernels/rmsnorm_row/rmsnorm_row.exercises.cpp: the CPU rows of lesson 05's first exercise, for float and
// double: the course's forward (rmsnorm_row_forward.cuh) and Part 1 of the learner's backward
// (kernels/exercises/rmsnorm_row.cuh). No torch header here, so editing the exercise recompiles this file
// in about a second.
#include "rmsnorm_row.cuh"

#include "rmsnorm_row.h"
#include "rmsnorm_row_forward.cuh"

void rmsnorm_row_forward_one(const float* x, const float* weight, int64_t n, float eps, float* y,
                             float* rstd) {
  rmsnorm_row_forward_cpu<float>(x, weight, n, eps, y, rstd);
}
void rmsnorm_row_forward_one(const double* x, const double* weight, int64_t n, double eps, double* y,
                             double* rstd) {
  rmsnorm_row_forward_cpu<double>(x, weight, n, eps, y, rstd);
}

void rmsnorm_backward_row_exercise(const float* grad_y, const float* x, const float* weight, float rstd,
                                   int64_t n, float* grad_x) {
  rmsnorm_backward_row_cpu<float>(grad_y, x, weight, rstd, n, grad_x);
}
void rmsnorm_backward_row_exercise(const double* grad_y, const double* x, const double* weight, double rstd,
                                   int64_t n, double* grad_x) {
  rmsnorm_backward_row_cpu<double>(grad_y, x, weight, rstd, n, grad_x);
}
