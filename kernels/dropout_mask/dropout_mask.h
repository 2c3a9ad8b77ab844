// kernels/dropout_mask/dropout_mask.h: what kernels/dropout_mask/dropout_mask.cpp (the PyTorch side) calls of
// lesson 05's second exercise (kernels/exercises/dropout_mask.cuh), from its torch-free parts. Raw pointers,
// nothing from torch.
//
//   dropout_mask_exercise(x, y, seed, offset, group, p)   the exercise on one group of 4 (float or double),
//                                                          on the CPU (dropout_mask.exercises.cpp)
//   dropout_mask_v1(x, y, n, seed, offset, p, stream)      one thread per group of 4 on the GPU
//                                                          (dropout_mask.exercises.cu)
#pragma once

#include <cstdint>

void dropout_mask_exercise(const float (&x)[4], float (&y)[4], uint64_t seed, uint64_t offset, uint64_t group,
                           double p);
void dropout_mask_exercise(const double (&x)[4], double (&y)[4], uint64_t seed, uint64_t offset,
                           uint64_t group, double p);

#if defined(WITH_CUDA) || defined(__CUDACC__)
#include "common/common.h"

// v1: thread g of the grid owns elements 4g .. 4g + 3 of x [n] (contiguous; T float, double, __half or
// __nv_bfloat16), loads them as Acc<T>, runs dropout_group4 (the exercise) and stores the ones below n.
template <typename T>
void dropout_mask_v1(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, double p,
                     cudaStream_t stream);
#endif
