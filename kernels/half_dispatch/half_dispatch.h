// kernels/half_dispatch/half_dispatch.h: what kernels/half_dispatch/half_dispatch.cpp (the PyTorch side)
// calls of lesson 05's third exercise (kernels/exercises/half_dispatch.cuh, float16 in an op's dispatch),
// from its torch-free parts. Raw pointers, nothing from torch.
//
//   DType                    x's dtype, as the PyTorch side names it to the torch-free parts
//   half_dispatch_cpu(...)   rows [begin, end) on the CPU (half_dispatch.exercises.cpp)
//   half_dispatch_v1(...)    every row on the GPU, one warp per row (half_dispatch.exercises.cu)
// Both return false when the exercise's dispatch() has no case for `dtype`.
#pragma once

#include <cstdint>

enum class DType { Float32, Float64, Float16, BFloat16 };

// x [M, N] contiguous, of `dtype`; out [M] (float64 for Float64, else float32): out[r] = mean of the
// squares of row r, summed in the type dispatch() gives, or in x's own type with sum_in_dtype (what breaks
// without float: the lesson shows it).
bool half_dispatch_cpu(DType dtype, const void* x, void* out, int64_t begin, int64_t end, int64_t N,
                       bool sum_in_dtype);

#if defined(WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>

// v1: warp w of the grid owns row w; its lanes sum elements lane, lane + 32, ... (the exercise's Part 2),
// then five shuffles add the 32 partial sums in the same type.
bool half_dispatch_v1(DType dtype, const void* x, void* out, int64_t M, int N, bool sum_in_dtype,
                      cudaStream_t stream);
#endif
