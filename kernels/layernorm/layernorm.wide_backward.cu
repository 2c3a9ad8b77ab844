// kernels/layernorm/layernorm.wide_backward.cu: LayerNorm's backward on the norm engine, for the shapes
// layernorm.route.cu sends there (rows longer than 8192, 16384 for 2-byte types; batches of at most 1 MiB);
// layernorm.wide.cu says why.
#include "layernorm.h"
#include "norm_engine/engine.cuh"

using norm_engine::Norm;

template <typename T>
int64_t layernorm_backward_wide_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                          int64_t M, int N) {
  return norm_engine::backward_workspace<T, Norm::kLayer>(grad_y, nullptr, x, weight, grad_x, M, N);
}

template <typename T>
void layernorm_backward_wide(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                             const T* weight, T* grad_x, T* grad_weight, T* grad_bias, Acc<T>* workspace,
                             int64_t M, int N, cudaStream_t stream) {
  norm_engine::launch_backward<T, Norm::kLayer, T>(grad_y, nullptr, x, mean, rstd, weight, grad_x,
                                                   grad_weight, grad_bias, workspace, M, N, stream);
}

template <typename T>
const char* layernorm_backward_wide_kernel(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                           int64_t M, int N) {
  return norm_engine::describe_backward<T, Norm::kLayer>(grad_y, nullptr, x, weight, grad_x, M, N);
}

#define INSTANTIATE(T)                                                                                     \
  template int64_t layernorm_backward_wide_workspace<T>(const T*, const T*, const T*, const T*, int64_t,   \
                                                        int);                                              \
  template void layernorm_backward_wide<T>(const T*, const T*, const Acc<T>*, const Acc<T>*, const T*, T*, \
                                           T*, T*, Acc<T>*, int64_t, int, cudaStream_t);                   \
  template const char* layernorm_backward_wide_kernel<T>(const T*, const T*, const T*, const T*, int64_t,  \
                                                         int);
INSTANTIATE(float)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
