// kernels/debugging/debugging.cu: lesson 07's broken kernels. TEACHING MATERIAL: every "bug" kernel here is
// wrong on purpose, to show what a learner sees first and which tool finds it; never copy one. Each bug sits
// beside its fix; the shared-memory bugs have no fix here, as fixing them is the lesson's exercise 1
// (kernels/exercises/debug_row_sum.cuh).
//
//   bug 1  double_tail_bug_kernel / double_tail_kernel     no `if (i < n)`: the last block writes past the
//   end.
//          What you see: usually nothing (the bytes past a tensor belong to the caching allocator). Found by:
//          a guard buffer around the output, compute-sanitizer memcheck.
//   bug 2  block_sum_nosync_kernel                          a shared-memory tree without __syncthreads():
//          sums that change from run to run. Found by: repeating a run, racecheck.
//   bug 3  block_sum_uninit_kernel                          threads past the row's end never write their
//          shared slot, the tree adds it anyway. Found by: zeros in, not zero out; short rows after a launch
//          that leaves values in shared memory (no compute-sanitizer tool checks shared memory for unwritten
//          reads).
//   bug 4  double_threads (threads=2048, checked=false)     2,048 threads per block (the limit is 1,024): the
//          launch fails, nothing runs, and without a launch check nothing says so. Found by: the launch
//          check.
//   bug 5  double_stream (fixed=false)                       launched on the legacy default stream, not on
//          PyTorch's current stream: out of order with PyTorch's work there, and not recorded by a CUDA graph
//          capture. Found by: a capture (it fails), reading the launch.
//   bug 6  add_one_bytes_bug_kernel / add_one_bytes_kernel   a 32-bit int index: past 2^31 elements it turns
//          negative and the kernel writes before the tensor. Found by: a tensor of 2^31 + a few bytes.
//   bug 7  accumulate_kernel (fixed=false)                   y += 2x into an output allocated with empty, not
//          zeros: it adds to whatever the memory held. Found by: initcheck (a read of global memory never
//          written).
//   bug 8  block_sum_divergent_sync_kernel                   __syncthreads() inside `if (threadIdx.x <
//   stride)`:
//          a barrier only some threads reach. Found by: synccheck.
//   tools  gather_checked_kernel                             a device-side assert on an index out of range
//          double_printf_kernel                              printf from a kernel
#include <cassert>
#include <cstdio>

#include "common/common.h"
#include "debugging.h"

namespace {
constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------------------
// bug 1: the tail
// ---------------------------------------------------------------------------------------------------------
__global__ void double_tail_bug_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  y[i] = 2.f * x[i];  // BUG: threads i >= n of the last block read and write past both tensors
}

__global__ void double_tail_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}

// ---------------------------------------------------------------------------------------------------------
// bugs 2, 3 and 8: a block reduction in shared memory (one block of 256 threads per row)
// ---------------------------------------------------------------------------------------------------------
// Thread t's share of a row: elements t, t + 256, t + 512, ... (0 for a thread past a short row's end).
__device__ float strided_sum(const float* row, int64_t cols) {
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
  return s;
}

__global__ void block_sum_nosync_kernel(const float* x, float* out, int64_t cols) {
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = strided_sum(x + blockIdx.x * cols, cols);
  // BUG: no __syncthreads() here nor after each step: a warp reads slots other warps have not written yet
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

__global__ void block_sum_uninit_kernel(const float* x, float* out, int64_t cols) {
  __shared__ float partial[kThreads];
  if (threadIdx.x < cols) {  // BUG: a thread past a short row's end leaves its slot as it was
    partial[threadIdx.x] = strided_sum(x + blockIdx.x * cols, cols);
  }
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// bug 8: the barrier inside the branch
__global__ void block_sum_divergent_sync_kernel(const float* x, float* out, int64_t cols) {
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = strided_sum(x + blockIdx.x * cols, cols);
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      partial[threadIdx.x] += partial[threadIdx.x + stride];
      __syncthreads();  // BUG: threads >= stride never reach this barrier
    }
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// ---------------------------------------------------------------------------------------------------------
// bug 7: adding into memory nobody wrote
// ---------------------------------------------------------------------------------------------------------
__global__ void accumulate_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += 2.f * x[i];  // reads y: right only if y started at 0
}

// ---------------------------------------------------------------------------------------------------------
// bug 6: a 32-bit index
// ---------------------------------------------------------------------------------------------------------
__global__ void add_one_bytes_bug_kernel(uint8_t* x, int64_t n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // BUG: past 2^31 this int is negative
  if (i < n) x[i] += 1;                                 // ... and a negative i passes the bounds check
}

__global__ void add_one_bytes_kernel(uint8_t* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += 1;
}

// ---------------------------------------------------------------------------------------------------------
// tools: a device-side assert, printf
// ---------------------------------------------------------------------------------------------------------
__global__ void gather_checked_kernel(const float* x, const int64_t* index, float* out, int64_t n,
                                      int64_t size) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t j = index[i];
  assert(j >= 0 && j < size);  // on failure: the file, line, block and thread, then a sticky error
  out[i] = x[j];
}

__global__ void double_printf_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  y[i] = 2.f * x[i];
  if (threadIdx.x == 0) printf("block %d: x[%lld] = %g -> y = %g\n", blockIdx.x, (long long)i, x[i], y[i]);
}
}  // namespace

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------
void double_tail(const float* x, float* y, int64_t n, bool fixed, cudaStream_t stream) {
  const int64_t blocks = ceil_div<int64_t>(n, kThreads);
  if (fixed) {
    double_tail_kernel<<<blocks, kThreads, 0, stream>>>(x, y, n);
  } else {
    double_tail_bug_kernel<<<blocks, kThreads, 0, stream>>>(x, y, n);
  }
  COURSE_LAUNCH_CHECK();
}

void block_sum_broken(const float* x, float* out, int64_t rows, int64_t cols, int bug, cudaStream_t stream) {
  if (bug == 2) {
    block_sum_nosync_kernel<<<rows, kThreads, 0, stream>>>(x, out, cols);
  } else if (bug == 3) {
    block_sum_uninit_kernel<<<rows, kThreads, 0, stream>>>(x, out, cols);
  } else {
    block_sum_divergent_sync_kernel<<<rows, kThreads, 0, stream>>>(x, out, cols);
  }
  COURSE_LAUNCH_CHECK();
}

void accumulate(const float* x, float* y, int64_t n, cudaStream_t stream) {
  accumulate_kernel<<<ceil_div<int64_t>(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  COURSE_LAUNCH_CHECK();
}

void double_threads(const float* x, float* y, int64_t n, int threads, bool checked, cudaStream_t stream) {
  const int64_t blocks = ceil_div<int64_t>(n, threads);
  double_tail_kernel<<<blocks, threads, 0, stream>>>(x, y, n);
  if (checked) COURSE_LAUNCH_CHECK();  // bug 4 is checked=false: a failed launch goes unnoticed
}

void double_stream(const float* x, float* y, int64_t n, bool fixed, cudaStream_t stream) {
  const int64_t blocks = ceil_div<int64_t>(n, kThreads);
  if (fixed) {
    double_tail_kernel<<<blocks, kThreads, 0, stream>>>(x, y, n);
  } else {
    double_tail_kernel<<<blocks, kThreads>>>(x, y, n);  // BUG: no stream, so the legacy default stream
  }
  COURSE_LAUNCH_CHECK();
}

void add_one_bytes(uint8_t* x, int64_t n, bool fixed, cudaStream_t stream) {
  const int64_t blocks = ceil_div<int64_t>(n, kThreads);
  if (fixed) {
    add_one_bytes_kernel<<<blocks, kThreads, 0, stream>>>(x, n);
  } else {
    add_one_bytes_bug_kernel<<<blocks, kThreads, 0, stream>>>(x, n);
  }
  COURSE_LAUNCH_CHECK();
}

void gather_checked(const float* x, const int64_t* index, float* out, int64_t n, int64_t size,
                    cudaStream_t stream) {
  gather_checked_kernel<<<ceil_div<int64_t>(n, kThreads), kThreads, 0, stream>>>(x, index, out, n, size);
  COURSE_LAUNCH_CHECK();
}

void double_printf(const float* x, float* y, int64_t n, cudaStream_t stream) {
  double_printf_kernel<<<ceil_div<int64_t>(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  COURSE_LAUNCH_CHECK();
}
