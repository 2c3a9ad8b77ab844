// kernels/layernorm/layernorm_cpu.h: LayerNorm's CPU code as kernels/layernorm/layernorm.cpp sees it. Plain
// C++, no torch.
//
// The CPU implementation (kernels/layernorm/layernorm.cpu.cpp, which instantiates it for the (T, P) pairs the
// glue dispatches to: T x's dtype, P the parameters', acc_t the math's). dw and db may be nullptr (not
// wanted); `exercise`: the exercises' CPU parts below do forward's row statistics (v2) or backward's grad_x
// (v1).
#pragma once

#include <cstdint>

template <typename T, typename P, typename acc_t>
void layernorm_forward_cpu(const T* x, const P* w, const P* b, T* y, acc_t* mean, acc_t* rstd, int64_t M,
                           int64_t N, acc_t eps, bool exercise);
template <typename T, typename P, typename acc_t>
void layernorm_backward_cpu(const T* dy, const T* x, const acc_t* mean, const acc_t* rstd, const P* w, T* dx,
                            P* dw, P* db, int64_t M, int64_t N, bool exercise);

// The CPU parts of lesson 03's exercises, compiled in kernels/layernorm/layernorm.exercises.cpp from the
// learner's headers (kernels/exercises/layernorm_warp_reduce.cuh and layernorm_backward_row.cuh, Part 1), so
// an edit there rebuilds that small file only. float and double; float16 and bfloat16 rows go through float.

// One row's mean and rstd = 1 / sqrt(biased variance + eps) (forward v2 on the CPU).
void layernorm_exercise_row_stats(const float* x, int64_t n, float eps, float* mean, float* rstd);
void layernorm_exercise_row_stats(const double* x, int64_t n, double eps, double* mean, double* rstd);

// One row's grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad_y * weight (backward v1 on the
// CPU).
void layernorm_exercise_backward_row(const float* grad_y, const float* x, const float* weight, float mean,
                                     float rstd, int64_t n, float* grad_x);
void layernorm_exercise_backward_row(const double* grad_y, const double* x, const double* weight, double mean,
                                     double rstd, int64_t n, double* grad_x);
