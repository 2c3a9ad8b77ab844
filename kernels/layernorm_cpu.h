// kernels/layernorm_cpu.h: the CPU parts of lesson 03's exercises, as kernels/layernorm.cpp sees them.
// Plain C++, no torch: they are compiled in kernels/layernorm.exercises.cpp from the learner's headers
// (kernels/exercises/layernorm_warp_reduce.cuh and layernorm_backward_row.cuh, Part 1), so an edit there
// rebuilds that small file only. float and double; the .cpp brings float16 and bfloat16 rows as float.
#pragma once

#include <cstdint>

// One row's mean and rstd = 1 / sqrt(biased variance + eps) (forward v2 on the CPU).
void layernorm_exercise_row_stats(const float* x, int64_t n, float eps, float* mean, float* rstd);
void layernorm_exercise_row_stats(const double* x, int64_t n, double eps, double* mean, double* rstd);

// One row's grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad_y * weight (backward v1 on the
// CPU).
void layernorm_exercise_backward_row(const float* grad_y, const float* x, const float* weight, float mean,
                                     float rstd, int64_t n, float* grad_x);
void layernorm_exercise_backward_row(const double* grad_y, const double* x, const double* weight, double mean,
                                     double rstd, int64_t n, double* grad_x);
