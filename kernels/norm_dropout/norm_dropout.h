// kernels/norm_dropout/norm_dropout.h: the launchers of kernels/norm_dropout/norm_dropout.cu, as the .cpp
// sees them. Raw pointers and a stream in, nothing from torch: T is float, double, __half or __nv_bfloat16;
// x, y, grad_y and grad_x are [M, N] row-major, weight [N] of T, rstd [M] of Acc<T> (float, double for
// double).
//
// Forward: y = dropout(x * rstd * weight), rstd = 1 / sqrt(mean(x^2) + eps) per row, in one kernel: flat
// element i = row * N + col of y is kept when philox::keep(seed, offset, i, threshold)
// (kernels/common/philox.cuh), and a kept value is scaled by `scale` (1 / (1 - p)) before its one rounding to
// T. (seed, offset) are unpacked from `rng` on the device; `state_out` (2 int64, may be null) receives them,
// as course::dropout's kernel writes them, so that course::dropout_backward regenerates the same mask.
#pragma once

#include "common/common.h"
#include "common/philox.cuh"

// v1: rows in registers (a row group of warps per row, 16-byte packs), one block per row with the row in
// shared memory where it is too long for registers; one value per pack where a row is not vectorizable.
template <typename T>
void rms_norm_dropout_forward_v1(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N,
                                 Acc<T> eps, philox::RngState rng, uint64_t threshold, Acc<T> scale,
                                 int64_t* state_out, cudaStream_t stream);

// Backward v2, grad_y through the mask and RMSNorm's backward in one pass over the rows: with
// g = kept ? grad_y * scale : 0 (the mask regenerated from `rng`), xhat = x * rstd,
//   grad_x = rstd * (g * w - xhat * mean(g * w * xhat)),  grad_weight = the column sums of g * xhat.
// Rows of up to 16 values a thread in registers; returns false (nothing launched) for longer rows, which
// take backward v1 (course::dropout_backward, then course::rms_norm_backward). `workspace`: the values of
// Acc<T> rms_norm_dropout_backward_v2_workspace(...) returns for the same pointers and sizes (0: no v2).
// P, grad_weight's type, is T, or float beside a half/bf16 x.
template <typename T>
int64_t rms_norm_dropout_backward_v2_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                               int64_t M, int N);
template <typename T, typename P>
bool rms_norm_dropout_backward_v2(const T* grad_y, const T* x, const Acc<T>* rstd, const T* weight, T* grad_x,
                                  P* grad_weight, Acc<T>* workspace, int64_t M, int N, philox::RngState rng,
                                  uint64_t threshold, Acc<T> scale, cudaStream_t stream);
