// kernels/hello/hello.cu: the smallest useful CUDA extension (lesson 00's first compile): y = x + 1.
//
//   add_one_kernel / add_one_cuda   one thread per element (the only version)
//
// No torch headers here, so nvcc compiles it in about a second.
#include "common/common.h"

namespace {
__global__ void add_one_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
}  // namespace

void add_one_cuda(const float* x, float* y, int64_t n, cudaStream_t stream) {
  add_one_kernel<<<ceil_div<int64_t>(n, 256), 256, 0, stream>>>(x, y, n);
  COURSE_LAUNCH_CHECK();
}
