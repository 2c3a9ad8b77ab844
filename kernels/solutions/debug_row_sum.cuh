// Exercise 1 (lesson 07): find and fix. Row sums of a float32 matrix [rows, cols]:
// out[r] = x[r][0] + x[r][1] + ... + x[r][cols - 1].
//
// This code compiles, often gives the right numbers, and is wrong. Part 1 (the CPU loop) has one bug, Part 2
// (the CUDA kernel) two. Find them with the lesson's tools: the self-check's cases (a failure prints the
// seed that replays it), inputs that make the answer obvious (a row of zeros sums to 0), and
// `debug_row_sum.check(sanitize=True)`, which runs your kernel under compute-sanitizer's memcheck and
// racecheck. Fix them in place and keep the algorithm: one block per row, a strided sum per thread, then a
// tree in shared memory.
#pragma once

#include <cstdint>

// Part 1: the CPU loop, one row after another.
inline void row_sum_cpu(const float* x, float* out, int64_t rows, int64_t cols) {
  // BEGIN SOLUTION
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0.f;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    out[r] = s;
  }
  // STUB
  // for (int64_t r = 0; r < rows; ++r) {
  //   float s = 0.f;
  //   for (int64_t c = 0; c <= cols; ++c) s += x[r * cols + c];
  //   out[r] = s;
  // }
  // END SOLUTION
}

#ifdef __CUDACC__
constexpr int kRowSumThreads = 256;  // the launcher's block size: a power of two, for the tree

// Part 2: the kernel. Block r sums row r: thread t adds elements t, t + 256, t + 512, ... of the row, writes
// its sum to partial[t], and the block adds the 256 partial sums in a tree (128 pairs, then 64, ...).
__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {
  __shared__ float partial[kRowSumThreads];
  const float* row = x + blockIdx.x * cols;
  // BEGIN SOLUTION
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
  partial[threadIdx.x] = s;  // every thread writes its slot, 0 if the row is shorter than the block
  __syncthreads();           // every slot written before any thread reads another's
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();  // this step's sums written before the next step reads them
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
  // STUB
  // if (threadIdx.x < cols) {
  //   float s = 0.f;
  //   for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
  //   partial[threadIdx.x] = s;
  // }
  // for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
  //   if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
  // }
  // if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
  // END SOLUTION
}
#endif
