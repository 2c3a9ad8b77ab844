// Exercise (lesson 02): the bias gradient as a block reduction in shared memory, in two passes.
//
// With z = x * scale + bias and y = relu(z), the gradient of the loss for bias[c] adds up, over every row r,
// the gradient that reaches z[r][c]:  grad_bias[c] = sum over r of grad_y[r][c] * relu'(z[r][c]),  and
// relu'(z) is 1 exactly where y > 0 (else 0). grad_y and y are [rows, cols] (row r starts at r * cols),
// grad_bias is [cols]. Your functions become backward version 4 of the fused op
// (kernels/fused_bias_relu/fused_bias_relu.cpp: `ext.bias_grad_into(grad_y, y, grad_bias, 4)` writes
// grad_bias alone; `ext.backward_from_mask(grad_y, y, scale, True, 4)` adds the course's grad_x).
// Version 3, the course's, is the naive kernel: one thread per column (bias_grad_column_kernel in
// fused_bias_relu.cu).
//
// Part 1 is the CPU loop (float and double; float16/bfloat16 tensors reach it as float), about 6 lines.
// Part 2 is the GPU version in two kernels, about 20 lines: pass 1 sums tiles of rows into partial sums,
// pass 2 adds the partial sums of each column. Check your work with lesson 02's self-check.
#pragma once

#include <cstdint>

// Part 1: the CPU loop. T is float or double.
template <typename T>
void bias_grad_cpu(const T* grad_y, const T* y, T* grad_bias, int64_t rows, int64_t cols) {
  // TODO(exercise): your code here (the solution is 6 lines).
}

#ifdef __CUDACC__
#include "common/common.h"

// Part 2. The block shape pass 1 is launched with (fused_bias_relu.exercises.cu):
// kBiasGradCols threads side by side on neighbouring columns (one warp: each of its loads is 32
// neighbouring values of one row, coalesced) and kBiasGradLanes rows of such threads (a power of two).
constexpr int kBiasGradCols = 32;
constexpr int kBiasGradLanes = 16;

// Pass 1, grid (ceil_div(cols, kBiasGradCols), parts), block (kBiasGradCols, kBiasGradLanes). Block
// (bx, b) owns columns bx * kBiasGradCols + threadIdx.x and the tile of rows [b * rows_per_block,
// (b + 1) * rows_per_block), cut at `rows` (the last tile is shorter). It writes one partial sum per column
// of its tile: partials[b * cols + c] = the sum over the tile's rows r of grad_y[r][c] where y[r][c] > 0.
// The kBiasGradLanes threads of a column share the tile's rows between them, then add their sums together
// in shared memory. T is float, double, __half or __nv_bfloat16: add in Acc<T> (float, or double for
// double), never in T; read with to_acc(...) (kernels/common/common.h). Row r starts at element r * cols,
// past 2^31 on large tensors.
template <typename T>
__global__ void bias_grad_partials_kernel(const T* __restrict__ grad_y, const T* __restrict__ y,
                                          Acc<T>* __restrict__ partials, int64_t rows, int64_t cols,
                                          int64_t rows_per_block) {
  // TODO(exercise): your code here (the solution is 15 lines).
}

// Pass 2, ceil_div(cols, 256) blocks of 256 threads: grad_bias[c] = the sum of the `parts` partial sums of
// column c (partials[p * cols + c], p = 0 .. parts - 1), written with from_acc<T>(sum).
template <typename T>
__global__ void bias_grad_finish_kernel(const Acc<T>* __restrict__ partials, int64_t parts,
                                        T* __restrict__ grad_bias, int64_t cols) {
  // TODO(exercise): your code here (the solution is 5 lines).
}
#endif
