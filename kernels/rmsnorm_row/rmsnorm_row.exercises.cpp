// kernels/rmsnorm_row/rmsnorm_row.exercises.cpp: Part 1 of lesson 05's first exercise
// (kernels/exercises/rmsnorm_row.cuh), for float and double. No torch header here, so editing the exercise
// recompiles this file in about a second.
#include "rmsnorm_row.cuh"

#include "rmsnorm_row.h"

void rmsnorm_row_exercise(const float* x, const float* weight, int64_t n, float eps, float* y, float* rstd) {
  rmsnorm_row_cpu<float>(x, weight, n, eps, y, rstd);
}
void rmsnorm_row_exercise(const double* x, const double* weight, int64_t n, double eps, double* y,
                          double* rstd) {
  rmsnorm_row_cpu<double>(x, weight, n, eps, y, rstd);
}
