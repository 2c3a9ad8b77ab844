// Exercise 1 (lesson 01): forward version 1 of y = a*x^3 + b*x^2 + c*x + d, the CPU loop, the CUDA kernel
// and the launcher that runs the kernel.
//
// coeffs = [a, b, c, d]. Each part writes y[i] for every i < n with Horner's rule, ((a*x + b)*x + c)*x + d:
// three multiply-adds instead of the powers, computed in Acc<T> (float, or double for double inputs) and
// rounded to T once, at the end.
//
// Part 1 (about 4 lines) is the CPU loop: version=1 on the CPU. Part 2 (about 4 lines) is the CUDA kernel,
// one thread per element, and Part 3 (about 3 lines) its launcher, which kernels/polynomial/polynomial.cpp
// calls for version=1 on a GPU. Check your work with the self-check cell in lesson 01.
#pragma once

#include <cstdint>

// Part 1: the CPU version, for T = float or double (float16 and bfloat16 tensors are converted to
// float around it, so T is also the type to compute in).
template <typename T>
void poly_forward_v1_cpu(const T* x, const T* coeffs, T* y, int64_t n) {
  // BEGIN SOLUTION
  const T a = coeffs[0], b = coeffs[1], c = coeffs[2], d = coeffs[3];
  for (int64_t i = 0; i < n; ++i) {
    y[i] = ((a * x[i] + b) * x[i] + c) * x[i] + d;
  }
  // END SOLUTION
}

#ifdef __CUDACC__
#include "common/common.h"

// Part 2: the CUDA kernel. T is float, double, __half or __nv_bfloat16: read with to_acc(x[i]), write with
// from_acc<T>(value) (kernels/common/common.h). Thread i of the whole grid handles element i. Two traps:
// a tensor can have more than 2^31 elements (what type is blockIdx.x * blockDim.x computed in?), and the
// last block of the grid runs partly past the end of the tensor.
template <typename T>
__global__ void poly_forward_v1_kernel(const T* __restrict__ x, const Acc<T>* __restrict__ coeffs,
                                       T* __restrict__ y, int64_t n) {
  // BEGIN SOLUTION
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const Acc<T> v = to_acc(x[i]);
  y[i] = from_acc<T>(((coeffs[0] * v + coeffs[1]) * v + coeffs[2]) * v + coeffs[3]);
  // END SOLUTION
}

constexpr int kV1Threads = 256;  // threads per block: a multiple of the warp size, enough blocks per SM

// Part 3: the launcher. The glue calls it with n > 0 (it returns early for an empty tensor) and with
// `stream`, PyTorch's current stream. Three things to get right:
//  * the grid: enough blocks of kV1Threads threads to cover all n elements. The count rounds up, and is
//    computed in 64 bits, as n is (common.h has a helper; its two arguments must have the same type);
//  * the stream: a launch without one goes to the legacy default stream, out of order with PyTorch's own
//    work on its current stream, and it is not recorded when PyTorch captures a CUDA graph;
//  * the launch check: a launch returns nothing, so a bad grid or a missing kernel image would surface later,
//    in some other call. Ask for the launch's error right away (common.h has the course's macro for it).
template <typename T>
void poly_forward_v1(const T* x, const Acc<T>* coeffs, T* y, int64_t n, cudaStream_t stream) {
  // BEGIN SOLUTION
  const int64_t blocks = ceil_div<int64_t>(n, kV1Threads);
  poly_forward_v1_kernel<T><<<blocks, kV1Threads, 0, stream>>>(x, coeffs, y, n);
  COURSE_LAUNCH_CHECK();
  // END SOLUTION
}
#endif
