// kernels/fused_bias_relu/fused_bias_relu.exercises.cu: the launcher of Part 2 of your
// kernels/exercises/bias_grad.cuh (backward v3's grad_bias: one thread per column), for the four CUDA types.
// No torch headers: an edit recompiles only this file.
#include "bias_grad.cuh"
#include "fused_bias_relu.h"

template <typename T>
void fbr_bias_grad_v3(const T* grad_y, const T* y, T* grad_bias, int64_t rows, int64_t cols,
                      cudaStream_t stream) {
  constexpr int kThreads = 256;
  bias_grad_kernel<T>
      <<<ceil_div<int64_t>(cols, kThreads), kThreads, 0, stream>>>(grad_y, y, grad_bias, rows, cols);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T) \
  template void fbr_bias_grad_v3<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
