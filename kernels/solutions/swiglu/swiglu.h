// swiglu.h: the CUDA launchers of swiglu.cu, as swiglu.cpp sees them. Raw pointers and a stream in, nothing
// from torch, so that an edit to the kernels recompiles swiglu.cu alone (about a second).
//
// x is [rows, 2h], contiguous: gate = x[:, :h], up = x[:, h:]. y and grad_y are [rows, h], grad_x [rows, 2h].
// T is float, double, __half or __nv_bfloat16; the math runs in float (double for double). The caller
// guarantees rows * h > 0.
#pragma once

#include "common/common.h"

template <typename T>
void swiglu_forward_cuda(const T* x, T* y, int64_t rows, int64_t h, cudaStream_t stream);

template <typename T>
void swiglu_backward_cuda(const T* grad_y, const T* x, T* grad_x, int64_t rows, int64_t h,
                          cudaStream_t stream);
