// kernels/rmsnorm_row/rmsnorm_row_forward.cuh: RMSNorm forward of one row, as section 1 of lesson 05 derives
// it: rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * weight. The course's code: lesson 05's first exercise
// (kernels/exercises/rmsnorm_row.cuh) is this row's backward, and takes the rstd that this saves.
//
//   rmsnorm_row_forward_cpu(x, weight, n, eps, y, rstd)         one row in plain C++ (T = float or double)
//   rmsnorm_row_forward_warp(x, weight, n, eps, lane, y, rstd)  one row by the 32 lanes of a warp
//
// Next to lesson 03's LayerNorm: no mean is subtracted, so one pass over the row gives the one statistic, and
// nothing cancels (x^2 >= 0: the sum only grows); there is no bias.
#pragma once

#include <cmath>
#include <cstdint>

template <typename T>
void rmsnorm_row_forward_cpu(const T* x, const T* weight, int64_t n, T eps, T* y, T* rstd) {
  T sq = 0;
  for (int64_t j = 0; j < n; ++j) sq += x[j] * x[j];
  const T r = T(1) / std::sqrt(sq / n + eps);
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] * r * weight[j];
  *rstd = r;
}

#ifdef __CUDACC__
#include "common/common.h"      // Acc<T>, to_acc(v), from_acc<T>(v)
#include "norm_engine/row.cuh"  // lane_sum(v): lesson 03's warp_sum, the course's copy; rsqrt_acc(v)

// Lane l takes elements l, l + 32, ... (32 neighbouring addresses per step: one coalesced transaction). The
// squares are summed in Acc<T>: a float16 running sum of 4096 squares rounds at every step, and one of 65536
// squares of values near 4 passes float16's largest value, 65504. lane_sum gives every lane the row's total,
// so that every lane can write its elements of y; lane 0 writes rstd.
template <typename T>
__device__ __forceinline__ void rmsnorm_row_forward_warp(const T* __restrict__ x,
                                                         const T* __restrict__ weight, int n, Acc<T> eps,
                                                         int lane, T* __restrict__ y, Acc<T>* rstd) {
  Acc<T> sq = 0;
  for (int j = lane; j < n; j += 32) sq += to_acc(x[j]) * to_acc(x[j]);
  const Acc<T> r = norm_engine::rsqrt_acc(norm_engine::lane_sum(sq) / n + eps);
  for (int j = lane; j < n; j += 32) y[j] = from_acc<T>(to_acc(x[j]) * r * to_acc(weight[j]));
  if (lane == 0) *rstd = r;
}
#endif
