// kernels/rmsnorm_row/rmsnorm_row.h: what kernels/rmsnorm_row/rmsnorm_row.cpp (the PyTorch side) calls of
// lesson 05's first exercise (kernels/exercises/rmsnorm_row.cuh), from its torch-free parts. Raw pointers,
// nothing from torch.
//
//   rmsnorm_row_exercise(x, weight, n, eps, y, rstd)     Part 1 on one row (rmsnorm_row.exercises.cpp)
//   rmsnorm_row_v1(x, weight, y, rstd, M, N, eps, stream) Part 2: one warp per row (rmsnorm_row.exercises.cu)
#pragma once

#include <cstdint>

void rmsnorm_row_exercise(const float* x, const float* weight, int64_t n, float eps, float* y, float* rstd);
void rmsnorm_row_exercise(const double* x, const double* weight, int64_t n, double eps, double* y,
                          double* rstd);

#if defined(WITH_CUDA) || defined(__CUDACC__)
#include "common/common.h"

// v1: warp w of the grid owns row w of x [M, N] (contiguous) and runs rmsnorm_row_warp, the exercise's
// Part 2, on it. T is float, double, __half or __nv_bfloat16; rstd is Acc<T> [M].
template <typename T>
void rmsnorm_row_v1(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                    cudaStream_t stream);
#endif
