// Exercise (lesson 01): the backward pass of y = a*x^3 + b*x^2 + c*x + d, for x.
//
// Given grad_y (dL/dy) and the input x, write grad_x = dL/dx = grad_y * dy/dx for every i < n, where
//     dy/dx = 3*a*x^2 + 2*b*x + c        (Horner form: (3*a*x + 2*b)*x + c)
// coeffs = [a, b, c, d]. Compute in Acc<T> (float, or double for double inputs).
//
// Part 1 is the CPU loop (it is what runs in CPU mode); Part 2 is the CUDA kernel, one thread per
// element. Each part is about 4 lines. Check your work with the self-check cell in lesson 01.
#pragma once

#include <cstdint>

// Part 1: the CPU version, for T = float or double (float16 and bfloat16 tensors are converted to
// float around it, so T is also the type to compute in).
template <typename T>
void poly_backward_v1_cpu(const T* grad_y, const T* x, const T* coeffs, T* grad_x, int64_t n) {
  const T a = coeffs[0], b = coeffs[1], c = coeffs[2];
  // BEGIN SOLUTION
  for (int64_t i = 0; i < n; ++i) {
    grad_x[i] = grad_y[i] * ((3 * a * x[i] + 2 * b) * x[i] + c);
  }
  // END SOLUTION
}

#ifdef __CUDACC__
#include "common/common.h"

// Part 2: the CUDA kernel, launched with ceil_div(n, 256) blocks of 256 threads. T is float, double,
// __half or __nv_bfloat16: read with to_acc(x[i]), write with from_acc<T>(value) (kernels/common/common.h).
// The index and the bounds as in your forward kernel (polynomial_forward.cuh).
template <typename T>
__global__ void poly_backward_v1_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                        const Acc<T>* __restrict__ coeffs, T* __restrict__ grad_x,
                                        int64_t n) {
  // BEGIN SOLUTION
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const Acc<T> v = to_acc(x[i]);
  grad_x[i] = from_acc<T>(to_acc(grad_y[i]) * ((3 * coeffs[0] * v + 2 * coeffs[1]) * v + coeffs[2]));
  // END SOLUTION
}
#endif
