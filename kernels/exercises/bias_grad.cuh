// Exercise (lesson 02): the bias gradient as a simple reduction.
//
// With z = x * scale + bias and y = relu(z), the gradient of the loss for bias[c] adds up, over every row r,
// the gradient that reaches z[r][c]:  grad_bias[c] = sum over r of grad_y[r][c] * relu'(z[r][c]),  and
// relu'(z) is 1 exactly where y > 0 (else 0). grad_y and y are [rows, cols] (row r starts at r * cols),
// grad_bias is [cols]. Your functions become backward version 3 of the fused op
// (kernels/fused_bias_relu/fused_bias_relu.cpp: `ext.backward_from_mask(grad_y, y, scale, True, 3)` computes
// grad_x with the course's kernel, then calls yours for grad_bias).
//
// Part 1 is the CPU loop (float and double; float16/bfloat16 tensors reach it as float), about 6 lines.
// Part 2 the CUDA kernel, one thread per column, about 6 lines. Check your work with lesson 02's self-check.
#pragma once

#include <cstdint>

// Part 1: the CPU loop. T is float or double.
template <typename T>
void bias_grad_cpu(const T* grad_y, const T* y, T* grad_bias, int64_t rows, int64_t cols) {
  // TODO(exercise): your code here (the solution is 6 lines).
}

#ifdef __CUDACC__
#include "common/common.h"

// Part 2: the CUDA kernel, launched with ceil_div(cols, 256) blocks of 256 threads: thread c sums column c
// down all the rows. Neighbouring threads of a warp read neighbouring columns of the same row at each step,
// so each step is one coalesced load of 32 values per warp. T is float, double, __half or __nv_bfloat16:
// add in Acc<T> (float, or double for double), never in T (a bfloat16 sum of 4096 values stops growing
// long before the end), read with to_acc(...), write with from_acc<T>(sum) (kernels/common/common.h).
template <typename T>
__global__ void bias_grad_kernel(const T* __restrict__ grad_y, const T* __restrict__ y,
                                 T* __restrict__ grad_bias, int64_t rows, int64_t cols) {
  // TODO(exercise): your code here (the solution is 6 lines).
}
#endif
