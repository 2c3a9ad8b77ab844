// kernels/rmsnorm/rmsnorm.h: the launchers of kernels/rmsnorm/rmsnorm.cu, as the .cpp sees them.
// Raw pointers and a stream in, nothing from torch. T is float, double, __half or __nv_bfloat16; the math
// and the saved rstd are Acc<T> (float, or double for double). x, y, grad_y and grad_x are [M, N]
// row-major; weight is [N] of T; rstd is [M]. P, grad_weight's type, is T, or float beside a half/bf16 x
// (float32 parameters, as native rms_norm takes them).
#pragma once

#include "common/common.h"

// Forward: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps), row by row; writes rstd for backward.
template <typename T>
void rmsnorm_forward_v1(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                        cudaStream_t stream);
template <typename T>
void rmsnorm_forward_v2(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                        cudaStream_t stream);

// Backward: grad_x = rstd * (g - xhat * mean(g * xhat)), g = grad_y * weight, xhat = x * rstd; and
// grad_weight = the column sums of grad_y * xhat.
template <typename T, typename P>
void rmsnorm_backward_v1(const T* grad_y, const T* x, const Acc<T>* rstd, const T* weight, T* grad_x,
                         P* grad_weight, int64_t M, int N, cudaStream_t stream);

// v2 needs a scratch buffer of rmsnorm_backward_v2_workspace(...) values of Acc<T> (per-block partial
// column sums); call it with the same pointers and sizes as the launch.
template <typename T>
int64_t rmsnorm_backward_v2_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                      int64_t M, int N);
template <typename T, typename P>
void rmsnorm_backward_v2(const T* grad_y, const T* x, const Acc<T>* rstd, const T* weight, T* grad_x,
                         P* grad_weight, Acc<T>* workspace, int64_t M, int N, cudaStream_t stream);
