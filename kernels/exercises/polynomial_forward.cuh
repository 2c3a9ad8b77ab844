// Exercise (lesson 01): the forward kernel, version 1, of y = a*x^3 + b*x^2 + c*x + d.
//
// coeffs = [a, b, c, d]. Write y[i] for every i < n with Horner's rule, ((a*x + b)*x + c)*x + d:
// three multiply-adds instead of the powers, computed in Acc<T> (float, or double for double inputs)
// and rounded to T once, at the end.
//
// Part 1 is the CPU loop (version=1 on the CPU); Part 2 is the CUDA kernel, one thread per element
// (version=1 on a GPU). Each part is about 4 lines. Check your work with the self-check cell in lesson 01.
#pragma once

#include <cstdint>

// Part 1: the CPU version, for T = float or double (float16 and bfloat16 tensors are converted to
// float around it, so T is also the type to compute in).
template <typename T>
void poly_forward_v1_cpu(const T* x, const T* coeffs, T* y, int64_t n) {
  // TODO(exercise): your code here (the solution is 4 lines).
}

#ifdef __CUDACC__
#include "common/common.h"

// Part 2: the CUDA kernel, launched with ceil_div(n, 256) blocks of 256 threads. T is float, double,
// __half or __nv_bfloat16: read with to_acc(x[i]), write with from_acc<T>(value) (kernels/common/common.h).
// Thread i of the whole grid is blockIdx.x * blockDim.x + threadIdx.x: compute it in int64_t (a
// tensor can have more than 2^31 elements, and 32-bit arithmetic wraps there), and skip i >= n (the
// last block is partly past the end).
template <typename T>
__global__ void poly_forward_v1_kernel(const T* __restrict__ x, const Acc<T>* __restrict__ coeffs,
                                       T* __restrict__ y, int64_t n) {
  // TODO(exercise): your code here (the solution is 4 lines).
}
#endif
