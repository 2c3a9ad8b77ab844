// Exercise (lesson 05): RMSNorm backward of one row, grad_x, on the CPU and on the GPU.
//
// The forward (the course's, kernels/rmsnorm_row/rmsnorm_row_forward.cuh) normalized each row of n values
// with one statistic, rstd, and saved it. Given the gradient of the output, grad_y, and the row's x, weight
// and saved rstd, write grad_x, the gradient of the input: section 1 of lesson 05 derives its formula
// ("Backward"), and its reference_backward checks it against autograd. Two passes over the row: one row
// statistic first (every element needs it), then grad_x element by element. Compute it all in the math type
// (float for float16/bfloat16 rows, or double). grad_weight, a sum over the rows, is the course's code.
//
// Part 1 is the CPU version (what runs in CPU mode, about 4 lines). Part 2 is the CUDA kernel, one warp (32
// threads) per row (about 10 lines). Check your work with the self-check cell in lesson 05.
//
// This file is compiled only by kernels/rmsnorm_row/rmsnorm_row.exercises.cpp (Part 1) and
// rmsnorm_row.exercises.cu (Part 2's launcher): an edit rebuilds in seconds.
#pragma once

#include <cstdint>

// Part 1: plain C++, one row. T is float or double (float16 and bfloat16 rows arrive converted to float).
// grad_y, x and grad_x hold the row's n values, weight n values (all ones when the op is called with
// weight=None); rstd is this row's. Write all n values of grad_x, and nothing past them.
template <typename T>
void rmsnorm_backward_row_cpu(const T* grad_y, const T* x, const T* weight, T rstd, int64_t n, T* grad_x) {
  // TODO(exercise): your code here (the solution is 4 lines).
}

#ifdef __CUDACC__
#include "common/common.h"      // Acc<T>, to_acc(v), from_acc<T>(v)
#include "norm_engine/row.cuh"  // norm_engine::lane_sum(v): lesson 03's warp_sum, the course's copy

// Part 2: the CUDA kernel, launched with ceil_div(M, 8) blocks of 256 threads (8 warps per block). grad_y,
// x and grad_x are [M, N], contiguous (row r starts at element r * N); rstd is Acc<T> [M], weight [N]. T is
// float, double, __half or __nv_bfloat16: read with to_acc(v), write with from_acc<T>(value), and keep every
// intermediate, sums included, in acc_t. The grid's warps (8 per block, in block order) own one row each:
// warp w row w, and its lane l (0..31) takes the row's elements l, l + 32, l + 64, ...
// norm_engine::lane_sum(v) returns the sum of v over the 32 lanes to every lane (all 32 must call it).
// Traps: the last block has warps past row M - 1 (they must not touch memory), and a tensor can have more
// than 2^31 elements (an offset row * N computed in 32 bits wraps there).
template <typename T>
__global__ void rmsnorm_backward_row_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                            const T* __restrict__ weight, const Acc<T>* __restrict__ rstd,
                                            T* __restrict__ grad_x, int64_t M, int N) {
  using acc_t = Acc<T>;
  // TODO(exercise): your code here (the solution is 11 lines).
}
#endif
