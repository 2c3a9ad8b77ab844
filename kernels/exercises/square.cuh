// Exercise (lesson 02): your own op, y = x * x, with its backward: grad_x = dL/dx = 2 * x * grad_y.
//
// kernels/square/square.cpp already wraps these functions in a C++ torch::autograd::Function
// (SquareFunction): its forward saves x and calls your forward, its backward calls your backward. Python sees
// it as `ext.square(x, 1)` (ext = loader.load("square")), differentiable. You write the loops and kernels.
//
// Part 1 is the CPU version (it is what runs in CPU mode; float16/bfloat16 tensors reach it as float);
// Part 2 the CUDA kernels, one thread per element. Each function is 1 to 4 lines. Check your work with
// the self-check cell in lesson 02: it checks every part you wrote on this machine.
#pragma once

#include <cstdint>

// Part 1: the CPU loops. T is float or double.
template <typename T>
void square_forward_cpu(const T* x, T* y, int64_t n) {
  // TODO(exercise): your code here (the solution is 1 lines).
}

template <typename T>
void square_backward_cpu(const T* grad_y, const T* x, T* grad_x, int64_t n) {
  // TODO(exercise): your code here (the solution is 1 lines).
}

#ifdef __CUDACC__
#include "common/common.h"

// Part 2: the CUDA kernels, launched with ceil_div(n, 256) blocks of 256 threads: more threads than
// elements, and n can pass 2^31. T is float, double, __half or __nv_bfloat16: compute in Acc<T> (float,
// or double for double), read with to_acc(x[i]) and write with from_acc<T>(value) (kernels/common/common.h).
template <typename T>
__global__ void square_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  // TODO(exercise): your code here (the solution is 4 lines).
}

template <typename T>
__global__ void square_backward_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                       T* __restrict__ grad_x, int64_t n) {
  // TODO(exercise): your code here (the solution is 3 lines).
}
#endif
