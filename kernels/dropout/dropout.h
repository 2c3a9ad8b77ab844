// kernels/dropout/dropout.h: the launchers of kernels/dropout/dropout.cu, as the .cpp sees them. Raw pointers
// and a stream in, nothing from torch: T is float, double, __half or __nv_bfloat16; x and y are contiguous, n
// elements.
//
// y[i] = x[i] * scale where element i is kept, else 0; element i is kept when
// philox::keep(seed, offset, i, threshold) (kernels/common/philox.cuh), with (seed, offset) unpacked from
// `rng` on the device. Forward and backward are the same launch: backward passes grad_y as x, grad_x as y and
// the (seed, offset) forward used. `state_out` (may be null): 2 int64 that receive the seed and offset the
// kernel used (forward writes them there for backward: in a captured CUDA graph they change every replay).
#pragma once

#include "common/common.h"
#include "common/philox.cuh"

// v1: one thread per group of 4 elements (one Philox call), element by element.
template <typename T>
void dropout_v1(const T* x, T* y, int64_t n, philox::RngState rng, uint64_t threshold, Acc<T> scale,
                int64_t* state_out, cudaStream_t stream);
// v2 (the default): 16-byte loads and stores, 4 or 8 elements a thread; v1 where a pointer is not aligned.
template <typename T>
void dropout_v2(const T* x, T* y, int64_t n, philox::RngState rng, uint64_t threshold, Acc<T> scale,
                int64_t* state_out, cudaStream_t stream);
