// masked_softmax.h: the CUDA launchers of masked_softmax.cu, as masked_softmax.cpp sees them. Raw pointers
// and a stream in, nothing from torch, so that an edit to the kernels recompiles masked_softmax.cu alone.
//
// x, y, grad_y, grad_x are [s.rows, s.Lk], contiguous; s (masked_softmax_rows.h) holds the rows' geometry and
// the masks' inputs. T is float, double, __half or __nv_bfloat16; the math runs in float (double for double).
// The caller guarantees s.rows * s.Lk > 0.
#pragma once

#include "common/common.h"
#include "masked_softmax_rows.h"

template <typename T>
void masked_softmax_forward_cuda(const T* x, T* y, const SoftmaxRows& s, double scale, cudaStream_t stream);

template <typename T>
void masked_softmax_backward_cuda(const T* grad_y, const T* y, T* grad_x, int64_t rows, int64_t Lk,
                                  double scale, cudaStream_t stream);
