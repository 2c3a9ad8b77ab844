// Exercise (lesson 03): the row statistics of LayerNorm forward version 2, on the CPU and on the GPU.
//
// LayerNorm needs two numbers per row of n values: the mean, and rstd = 1 / sqrt(variance + eps), with
// the biased variance (divide by n) computed in two passes, first the mean, then the mean of
// (x - mean)^2. Never as mean(x^2) - mean(x)^2: for a row with a large mean that difference cancels
// catastrophically (the lesson's numerics cell shows it, and the self-check has such a row).
//
// Part 1 is the CPU version (it is what runs in CPU mode). Part 2 is the heart of the GPU version: one
// warp (32 threads) owns a row; lane l adds up elements l, l + 32, l + 64, ..., and then the 32 partial
// sums must be added across the warp, with shuffles, so that every lane gets the total. Part 1 is about
// 10 lines, Part 2 about 1. Check your work with the self-check cell in lesson 03.
//
// This file is compiled only by kernels/layernorm/layernorm.exercises.cpp (Part 1) and
// kernels/layernorm/layernorm.exercises.cu (Part 2, with forward_v2_kernel, which calls your warp_sum): an
// edit rebuilds in seconds.
#pragma once

#include <cmath>
#include <cstdint>

// Part 1: the CPU version, plain C++. T is float or double (float16 and bfloat16 rows arrive converted to
// float). Write the row's mean to *mean and its rstd to *rstd.
template <typename T>
void layernorm_row_stats_cpu(const T* x, int64_t n, T eps, T* mean, T* rstd) {
  // TODO(exercise): your code here (the solution is 10 lines).
}

#ifdef __CUDACC__
// Part 2: the sum of v over the 32 lanes of a warp, returned to EVERY lane (all of them use it).
// forward_v2_kernel (kernels/layernorm/layernorm.exercises.cu) calls it twice per row: for the sum of x and
// for the sum of (x - mean)^2; backward v1 (the layernorm_backward_row exercise) uses it too. acc_t is float
// or double. The warp-shuffle intrinsics (__shfl_*_sync, in the CUDA C++ Programming Guide) read a register
// of another lane; pick the one whose partners make a butterfly, so that every lane ends with the total.
template <typename acc_t>
__device__ __forceinline__ acc_t warp_sum(acc_t v) {
  // TODO(exercise): your code here (the solution is 1 lines).
  return v;
}
#endif
