// kernels/square/square.h: the course's functions of the square op (lesson 02b's exercise), as the glue
// (your kernels/exercises/square_glue.h, compiled by square.glue.cpp) calls them. Nothing from torch: raw
// pointers in, n elements, outputs written; they check nothing and allocate nothing (that is the glue's job).
//
//   square_forward_cpu / square_backward_cpu   the CPU loops (square.cpp), parallel over the elements.
//                                               T is float, double, at::Half or at::BFloat16 (computed in
//                                               float), the scalar_t of AT_DISPATCH_FLOATING_TYPES_AND2
//   square_forward_v2 / square_backward_v2     the CUDA launchers (square.cu): one 16-byte Pack per thread,
//                                               on `stream`. T is float, double, __half or __nv_bfloat16
//                                               (CudaType<scalar_t>::type, kernels/common/checks.h)
//
// y[i] = x[i] * x[i] and grad_x[i] = 2 * x[i] * grad_y[i] for i < n, every buffer contiguous.
#pragma once

#include <cstdint>

template <typename T>
void square_forward_cpu(const T* x, T* y, int64_t n);
template <typename T>
void square_backward_cpu(const T* grad_y, const T* x, T* grad_x, int64_t n);

#if defined(WITH_CUDA) || defined(__CUDACC__)
#include "common/common.h"

template <typename T>
void square_forward_v2(const T* x, T* y, int64_t n, cudaStream_t stream);
template <typename T>
void square_backward_v2(const T* grad_y, const T* x, T* grad_x, int64_t n, cudaStream_t stream);
#endif
