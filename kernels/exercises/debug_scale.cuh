// Exercise 2 (lesson 07): find and fix. y = a * x + b for float32, four elements at a time.
//
// This code passes a quick test on a tensor of 1,024 elements and is wrong. Part 1 (the CPU loop) has one
// bug, Part 2 (the CUDA kernel, one float4 of 16 bytes per thread) two. Find them with the lesson's tools:
// the self-check's cases (sizes that are not multiples of 4, a tensor of more than 2^31 elements where the
// GPU has the memory) and `debug_scale.check(sanitize=True)` (compute-sanitizer's memcheck). Fix them in
// place and keep the float4 loads and stores for every full group of four.
#pragma once

#include <cstdint>

// Part 1: the CPU loop, unrolled by four.
inline void scale_shift_cpu(const float* x, float* y, int64_t n, float a, float b) {
  // TODO(exercise): find and fix the bugs in this code (the file's header says how many).
  for (int64_t i = 0; i < n; i += 4) {
    y[i] = a * x[i] + b;
    y[i + 1] = a * x[i + 1] + b;
    y[i + 2] = a * x[i + 2] + b;
    y[i + 3] = a * x[i + 3] + b;
  }
}

#ifdef __CUDACC__
constexpr int kScaleThreads = 256;

// Part 2: the kernel. Thread t of the grid handles elements 4t .. 4t + 3 with one 16-byte load and store
// (x and y are 16-byte aligned: the glue checks it). The launcher starts ceil(n / 4) threads, rounded up to
// whole blocks.
__global__ void scale_shift_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, float a,
                                   float b) {
  // TODO(exercise): find and fix the bugs in this code (the file's header says how many).
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i < n) {
    const float4 v = *reinterpret_cast<const float4*>(x + i);
    *reinterpret_cast<float4*>(y + i) = make_float4(a * v.x + b, a * v.y + b, a * v.z + b, a * v.w + b);
  }
}
#endif
