// cross_entropy.h: the CUDA launchers of cross_entropy.cu, as cross_entropy.cpp sees them. Raw pointers and a
// stream in, nothing from torch, so that an edit to the kernels recompiles cross_entropy.cu alone.
//
// x is [rows, V] logits, row r at x + r * ld (unit stride along a row); target is [rows] int64. T is float,
// double, __half or __nv_bfloat16; the math runs in Acc<T> (float, double for double), lse is Acc<T>.
// reduction is kReduceNone, kReduceMean or kReduceSum (cross_entropy_math.h). The caller guarantees rows > 0,
// V > 0, and scratch memory: row_loss [rows] of Acc<T> (mean and sum), count one double (mean).
#pragma once

#include "common/common.h"

// Forward: lse[r] (when lse is not null) and the loss: loss[r] of T for kReduceNone, else one T, the mean
// over the rows whose target is not ignore_index, or the sum. With grad == x, also the in-place pass: the
// gradient of the loss with respect to x written over x (lse may then be null).
template <typename T>
void cross_entropy_forward_cuda(const T* x, T* grad, int64_t ld, const int64_t* target, int64_t rows,
                                int64_t V, int64_t ignore_index, double eps, int64_t reduction, T* loss,
                                Acc<T>* lse, Acc<T>* row_loss, double* count, cudaStream_t stream);

// Backward: grad [rows, V] (contiguous) = d loss / d x for the incoming gradient grad_loss (one T, or [rows]
// of T when per_row: the kReduceNone loss's), from x and lse.
template <typename T>
void cross_entropy_backward_cuda(const T* grad_loss, bool per_row, const T* x, int64_t ld,
                                 const int64_t* target, const Acc<T>* lse, T* grad, int64_t rows, int64_t V,
                                 int64_t ignore_index, double eps, int64_t reduction, double* count,
                                 cudaStream_t stream);

// The in-place path's backward: grad row r *= grad_loss (one T, or grad_loss[r] when per_row); a factor of
// exactly 1 is read on the device and skips the row, so the usual backward from a scalar loss moves no row.
template <typename T>
void cross_entropy_scale_cuda(T* grad, int64_t ld, const T* grad_loss, bool per_row, int64_t rows, int64_t V,
                              cudaStream_t stream);
