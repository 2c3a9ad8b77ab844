// kernels/debugging/debugging.h: the launchers of debugging.cu and of lesson 07's two exercises
// (debugging.exercises.cpp/.cu), as debugging.cpp sees them. Raw pointers and a stream in, no torch.
#pragma once

#include <cstdint>

// The exercises, CPU parts (kernels/exercises/debug_row_sum.cuh and debug_scale.cuh, Part 1).
void row_sum_cpu_part(const float* x, float* out, int64_t rows, int64_t cols);
void scale_shift_cpu_part(const float* x, float* y, int64_t n, float a, float b);

#ifdef WITH_CUDA
#include <cuda_runtime.h>

// The exercises, CUDA parts (Part 2 of each file); the launchers are the course's.
void row_sum(const float* x, float* out, int64_t rows, int64_t cols, cudaStream_t stream);
void scale_shift(const float* x, float* y, int64_t n, float a, float b, cudaStream_t stream);

// debugging.cu: each bug beside its fix (`fixed` picks), or alone where the fix is an exercise.
void double_tail(const float* x, float* y, int64_t n, bool fixed, cudaStream_t stream);
void block_sum_broken(const float* x, float* out, int64_t rows, int64_t cols, int bug, cudaStream_t stream);
void double_threads(const float* x, float* y, int64_t n, int threads, bool checked, cudaStream_t stream);
void double_stream(const float* x, float* y, int64_t n, bool fixed, cudaStream_t stream);
void add_one_bytes(uint8_t* x, int64_t n, bool fixed, cudaStream_t stream);
void gather_checked(const float* x, const int64_t* index, float* out, int64_t n, int64_t size,
                    cudaStream_t stream);
void double_printf(const float* x, float* y, int64_t n, cudaStream_t stream);
void accumulate(const float* x, float* y, int64_t n, cudaStream_t stream);
#endif
