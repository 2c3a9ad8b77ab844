// kernels/fused_bias_relu/fused_bias_relu.h: the launchers of kernels/fused_bias_relu/fused_bias_relu.cu, as
// the .cpp sees them. Raw pointers and a stream in, nothing from torch: T is float, double, __half or
// __nv_bfloat16. x, y, grad_y and grad_x are contiguous [rows, cols] (x of shape [..., C] seen as rows =
// numel / C, cols = C), bias and grad_bias are [cols], scale is a number in Acc<T> (float, or double for
// double).
#pragma once

#include "common/common.h"
#include "fused_bias_relu_cpu.h"  // Saved, BiasSums

template <typename T>
void fbr_forward_v1(const T* x, const T* bias, Acc<T> scale, T* y, int64_t rows, int64_t cols,
                    cudaStream_t stream);
// v2 also writes the 1-byte mask when `mask` is not null. y may be x (the in-place variant).
template <typename T>
void fbr_forward_v2(const T* x, const T* bias, Acc<T> scale, T* y, bool* mask, int64_t rows, int64_t cols,
                    cudaStream_t stream);
// v3: one Pack per thread over the flat tensor (the default); v2 when cols or a pointer does not allow Packs
// (v3 with one value per thread when `bits` is wanted). `bits` (may be null): ceil(rows * cols / 32) words.
template <typename T>
void fbr_forward_v3(const T* x, const T* bias, Acc<T> scale, T* y, bool* mask, uint32_t* bits, int64_t rows,
                    int64_t cols, cudaStream_t stream);

// `saved` is x (kInput, and then bias is used), y (kOutput), the mask (kMask, bool) or the bits (kBits).
// grad_bias is written when it is not null, through `partials`: a scratch buffer of
// fbr_backward_partial_rows(...) * cols values of Acc<T>, from the same arguments. BiasSums::kPartials (v1):
// two kernels (grad_x and per-block partial sums, then a small kernel adds them); kCooperative (v2, the
// default): one cooperative kernel that also adds them (v1 where the GPU cannot launch cooperatively, or
// without grad_bias). Backward v3 and v4 call it without grad_bias, then fbr_bias_grad_v3 or _v4.
template <typename T>
int fbr_backward_partial_rows(const T* grad_y, const void* saved, Saved kind, const T* bias, const T* grad_x,
                              int64_t rows, int64_t cols, BiasSums sums);
template <typename T>
void fbr_backward(const T* grad_y, const void* saved, Saved kind, const T* bias, Acc<T> scale, T* grad_x,
                  Acc<T>* partials, T* grad_bias, int64_t rows, int64_t cols, BiasSums sums,
                  cudaStream_t stream);

// Backward v3's grad_bias: grad_bias[c] = the sum over rows of grad_y where y > 0, one thread per column
// (fused_bias_relu.cu).
template <typename T>
void fbr_bias_grad_v3(const T* grad_y, const T* y, T* grad_bias, int64_t rows, int64_t cols,
                      cudaStream_t stream);

// Backward v4's grad_bias (yours: kernels/exercises/bias_grad.cuh Part 2, launched in
// fused_bias_relu.exercises.cu): per-block partial sums of tiles of rows, then a second kernel adds them.
// `partials` is a scratch buffer of fbr_bias_grad_v4_parts(rows) * cols values of Acc<T>.
int64_t fbr_bias_grad_v4_parts(int64_t rows);
template <typename T>
void fbr_bias_grad_v4(const T* grad_y, const T* y, Acc<T>* partials, T* grad_bias, int64_t rows, int64_t cols,
                      cudaStream_t stream);
