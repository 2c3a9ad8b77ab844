// Exercise (lesson 05): RMSNorm forward of one row, on the CPU and on the GPU.
//
// RMSNorm scales a row of n values by one statistic, rstd = 1 / sqrt(mean(x^2) + eps), and by the weight:
// y[j] = x[j] * rstd * weight[j]. Next to lesson 03's LayerNorm: no mean is subtracted (so one pass over
// the row gives the statistic, and there is no cancellation to avoid) and there is no bias.
//
// Part 1 is the CPU version (what runs in CPU mode, about 5 lines). Part 2 is the GPU version, one warp
// (32 threads) per row, about 6 lines: lane l handles elements l, l + 32, l + 64, ...; the lanes' partial
// sums meet through shuffles (lesson 03's warp_sum), so that every lane can normalize its elements. Sum in
// Acc<T> (float for float16 and bfloat16 rows): a float16 running sum of 4096 squares loses most of its bits,
// and one of 65536 squares of values near 4 overflows float16's largest value, 65504.
// Check your work with the self-check cell in lesson 05.
//
// This file is compiled only by kernels/rmsnorm_row/rmsnorm_row.exercises.cpp (Part 1) and
// rmsnorm_row.exercises.cu (Part 2, with the kernel that calls it): an edit rebuilds in seconds.
#pragma once

#include <cmath>
#include <cstdint>

// Part 1: plain C++. T is float or double (float16 and bfloat16 rows arrive converted to float). Write
// y[0..n) and *rstd.
template <typename T>
void rmsnorm_row_cpu(const T* x, const T* weight, int64_t n, T eps, T* y, T* rstd) {
  // TODO(exercise): your code here (the solution is 5 lines).
}

#ifdef __CUDACC__
#include "common/common.h"  // Acc<T>, to_acc(v), from_acc<T>(v)

// Part 2: the row x[0..n) of T (float, double, __half or __nv_bfloat16), normalized by the 32 lanes of one
// warp; `lane` is this thread's lane (0..31). Every lane writes its elements of y; lane 0 writes *rstd.
// Hint: convert each element with to_acc(x[j]) before squaring, and write with from_acc<T>(value);
// __shfl_xor_sync(0xffffffffu, v, offset) for offset = 16, 8, 4, 2, 1 leaves the warp's sum in every lane;
// rsqrt(v) (float or double) is 1 / sqrt(v).
template <typename T>
__device__ __forceinline__ void rmsnorm_row_warp(const T* __restrict__ x, const T* __restrict__ weight, int n,
                                                 Acc<T> eps, int lane, T* __restrict__ y, Acc<T>* rstd) {
  // TODO(exercise): your code here (the solution is 6 lines).
}
#endif
