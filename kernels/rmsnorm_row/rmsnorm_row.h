// kernels/rmsnorm_row/rmsnorm_row.h: what kernels/rmsnorm_row/rmsnorm_row.cpp (the PyTorch side) calls of
// lesson 05's first exercise (kernels/exercises/rmsnorm_row.cuh: RMSNorm backward of one row) and of the
// course's forward row (rmsnorm_row_forward.cuh), from the torch-free parts. Raw pointers, nothing from
// torch.
//
//   rmsnorm_row_forward_one(x, weight, n, eps, y, rstd)             the course's forward of one row
//   rmsnorm_backward_row_exercise(grad_y, x, weight, rstd, n, grad_x) Part 1 on one row
//                                                                   (both in rmsnorm_row.exercises.cpp)
//   rmsnorm_row_forward_v1(x, weight, y, rstd, M, N, eps, stream)   forward, one warp per row
//   rmsnorm_row_backward_v1(grad_y, x, weight, rstd, grad_x, M, N, stream)   Part 2, the exercise's kernel
//                                                                   (both in rmsnorm_row.exercises.cu)
#pragma once

#include <cstdint>

void rmsnorm_row_forward_one(const float* x, const float* weight, int64_t n, float eps, float* y,
                             float* rstd);
void rmsnorm_row_forward_one(const double* x, const double* weight, int64_t n, double eps, double* y,
                             double* rstd);
void rmsnorm_backward_row_exercise(const float* grad_y, const float* x, const float* weight, float rstd,
                                   int64_t n, float* grad_x);
void rmsnorm_backward_row_exercise(const double* grad_y, const double* x, const double* weight, double rstd,
                                   int64_t n, double* grad_x);

#if defined(WITH_CUDA) || defined(__CUDACC__)
#include "common/common.h"

// Row r of x, grad_y, y and grad_x [M, N] (contiguous) starts at element r * N; rstd is Acc<T> [M], weight
// [N]. T is float, double, __half or __nv_bfloat16. M >= 1, N >= 1.
template <typename T>
void rmsnorm_row_forward_v1(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                            cudaStream_t stream);
template <typename T>
void rmsnorm_row_backward_v1(const T* grad_y, const T* x, const T* weight, const Acc<T>* rstd, T* grad_x,
                             int64_t M, int N, cudaStream_t stream);
#endif
