// kernels/add_norm/add_norm.h: the launchers of kernels/add_norm/add_norm.cu, as the .cpp sees them. Raw
// pointers and a stream in, nothing from torch. T is float, double, __half or __nv_bfloat16, the math Acc<T>;
// x, residual, y, h and the gradients are [M, N] row-major; weight and bias [N] of T; mean and rstd [M]. P,
// the parameter gradients' type, is T, or float beside a half/bf16 x.
#pragma once

#include "common/common.h"

// h = x + residual (rounded to T), y = RMSNorm(h) * weight; writes h, y and rstd. One kernel.
template <typename T>
void add_rms_norm_forward(const T* x, const T* residual, const T* weight, T* y, T* h, Acc<T>* rstd, int64_t M,
                          int N, Acc<T> eps, cudaStream_t stream);
// h = x + residual, y = LayerNorm(h) * weight + bias; writes h, y, mean and rstd. One kernel.
template <typename T>
void add_layer_norm_forward(const T* x, const T* residual, const T* weight, const T* bias, T* y, T* h,
                            Acc<T>* mean, Acc<T>* rstd, int64_t M, int N, Acc<T> eps, cudaStream_t stream);

// grad_input (the gradient of both x and residual) = the norm's grad_x from grad_y, plus grad_h (nullptr:
// none); grad_weight (and grad_bias) the column sums. A scratch buffer of ..._workspace(...) values of
// Acc<T>; call it with the same pointers and sizes as the launch.
template <typename T>
int64_t add_rms_norm_backward_workspace(const T* grad_y, const T* grad_h, const T* h, const T* weight,
                                        const T* grad_input, int64_t M, int N);
template <typename T, typename P>
void add_rms_norm_backward(const T* grad_y, const T* grad_h, const T* h, const Acc<T>* rstd, const T* weight,
                           T* grad_input, P* grad_weight, Acc<T>* workspace, int64_t M, int N,
                           cudaStream_t stream);
template <typename T>
int64_t add_layer_norm_backward_workspace(const T* grad_y, const T* grad_h, const T* h, const T* weight,
                                          const T* grad_input, int64_t M, int N);
template <typename T, typename P>
void add_layer_norm_backward(const T* grad_y, const T* grad_h, const T* h, const Acc<T>* mean,
                             const Acc<T>* rstd, const T* weight, T* grad_input, P* grad_weight, P* grad_bias,
                             Acc<T>* workspace, int64_t M, int N, cudaStream_t stream);
