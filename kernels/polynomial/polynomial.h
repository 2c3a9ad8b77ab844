// kernels/polynomial/polynomial.h: the CUDA launchers (kernels/polynomial/polynomial.cu and
// polynomial.exercises.cu), as the .cpp sees them. Raw pointers and a stream in, nothing from torch: T is
// float, double, __half or __nv_bfloat16, and coeffs = [a, b, c, d] in Acc<T> (float, or double for double)
// lives on the same GPU as x.
#pragma once

#include "common/common.h"

// Forward v1 is exercise 1: its kernel and this launcher are in kernels/exercises/polynomial_forward.cuh,
// compiled by kernels/polynomial/polynomial.exercises.cu.
template <typename T>
void poly_forward_v1(const T* x, const Acc<T>* coeffs, T* y, int64_t n, cudaStream_t stream);

// The given versions, in kernels/polynomial/polynomial.cu.
template <typename T>
void poly_forward_v2(const T* x, const Acc<T>* coeffs, T* y, int64_t n, cudaStream_t stream);

// Backward v1: grad_x only, one thread per element.
template <typename T>
void poly_backward_v1(const T* grad_y, const T* x, const Acc<T>* coeffs, T* grad_x, int64_t n,
                      cudaStream_t stream);

// Backward v2 also writes grad_coeffs (4 values) when it is not null, using `partials`, a scratch buffer of
// 4 * poly_backward_v2_blocks(n) values.
int poly_backward_v2_blocks(int64_t n);
template <typename T>
void poly_backward_v2(const T* grad_y, const T* x, const Acc<T>* coeffs, T* grad_x, Acc<T>* partials,
                      Acc<T>* grad_coeffs, int64_t n, cudaStream_t stream);
