// Exercise (lesson 03): grad_x of one row of LayerNorm backward version 1, on the CPU and on the GPU.
//
// Section 1 of the lesson derives, per row of n values, with xhat = (x - mean) * rstd and g = grad_y *
// weight:
//
//     grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat))
//
// (mean over the n values of the row). mean and rstd are the ones forward saved. Two passes: the two
// means first, then grad_x element by element. Part 1 (CPU) is about 10 lines, Part 2 (CUDA) about 10.
// grad_weight and grad_bias (sums over the rows) are computed by given code. Check your work with the
// self-check cell in lesson 03.
//
// This file is compiled only by kernels/layernorm/layernorm.exercises.cpp (Part 1) and
// kernels/layernorm/layernorm.exercises.cu (Part 2, with backward_v1_dx_kernel, which calls yours): an edit
// rebuilds in seconds.
#pragma once

#include <cstdint>

// Part 1: the CPU version, plain C++. T is float or double (float16 and bfloat16 rows arrive converted to
// float). grad_y, x and grad_x are the row's n values, weight has n values. Write all n of grad_x.
template <typename T>
void layernorm_backward_row_cpu(const T* grad_y, const T* x, const T* weight, T mean, T rstd, int64_t n,
                                T* grad_x) {
  // TODO(exercise): your code here (the solution is 11 lines).
}

#ifdef __CUDACC__
#include "common/common.h"
#include "layernorm_warp_reduce.cuh"  // warp_sum: your answer to the first exercise

// Part 2: one warp computes grad_x of one row; this thread is lane `lane` (0..31) of it. T is float,
// double, __half or __nv_bfloat16; compute in acc_t = Acc<T> (to_acc(v) converts a T, from_acc<T>(v) rounds
// back). Lane l handles elements l, l + 32, l + 64, ... (neighbouring lanes read neighbouring addresses);
// warp_sum(v) gives every lane the total of the 32 lanes' v. Every lane must know both means.
template <typename T>
__device__ __forceinline__ void layernorm_backward_row_warp(const T* grad_y, const T* x, const T* weight,
                                                            Acc<T> mean, Acc<T> rstd, int n, int lane,
                                                            T* grad_x) {
  using acc_t = Acc<T>;
  // TODO(exercise): your code here (the solution is 11 lines).
}
#endif
