// kernels/square/square.h: the functions of the square op (lesson 02's exercise), as
// kernels/square/square.cpp sees them. Nothing from torch. Part 1, the CPU loops, are your
// kernels/exercises/square.cuh compiled by square.exercises.cpp for float and double; the CUDA launchers take
// raw pointers and a stream, T is float, double, __half or __nv_bfloat16.
//
//   square_forward_cpu / square_backward_cpu   Part 1 (yours), float and double
//   square_forward_v1 / square_backward_v1     Part 2 (yours): one thread per element (square.exercises.cu)
//   square_forward_v2 / square_backward_v2     the course's: one 16-byte Pack per thread (square.cu)
#pragma once

#include <cstdint>

template <typename T>
void square_forward_cpu(const T* x, T* y, int64_t n);
template <typename T>
void square_backward_cpu(const T* grad_y, const T* x, T* grad_x, int64_t n);

#if defined(WITH_CUDA) || defined(__CUDACC__)
#include "common/common.h"

template <typename T>
void square_forward_v1(const T* x, T* y, int64_t n, cudaStream_t stream);
template <typename T>
void square_backward_v1(const T* grad_y, const T* x, T* grad_x, int64_t n, cudaStream_t stream);
template <typename T>
void square_forward_v2(const T* x, T* y, int64_t n, cudaStream_t stream);
template <typename T>
void square_backward_v2(const T* grad_y, const T* x, T* grad_x, int64_t n, cudaStream_t stream);
#endif
