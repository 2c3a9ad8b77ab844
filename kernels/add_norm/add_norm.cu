// kernels/add_norm/add_norm.cu: the pre-norm transformer's hot path fused, h = x + residual; y = norm(h),
// returning both, for RMSNorm and LayerNorm (lesson 05).
//
// Unfused, the add reads x and residual and writes h, then the norm reads h again and writes y: 5*M*N
// elements forward. Fused, h goes from registers to both its store and the norm: 4*M*N (read x and
// residual, write h and y), and backward reads grad_y, grad_h and h and writes one grad_input (the gradient
// of x and of residual alike: h's gradient is both): 4*M*N, against 5 for a norm backward plus an add. The
// kernels are the norm engine's (norm_engine/engine.cuh), with the add in their loads (load_input) and grad_h
// in their stores:
//
//   v1 (the only version)  forward: forward_kernel / forward_long_kernel with kAdd, add_rms_norm_forward and
//                          add_layer_norm_forward; backward: backward_kernel (long rows: backward_bulk_kernel
//                          on sm_90, else the long-row pair) with grad_h, then sum_partials_kernel,
//                          add_rms_norm_backward and
//                          add_layer_norm_backward.
//
// h is rounded to T before it is normalized, as the unfused `x + residual` rounds it, so y is the same
// function of x and residual as the unfused pair computes.
#include "add_norm.h"
#include "norm_engine/engine.cuh"

using norm_engine::Norm;

template <typename T>
void add_rms_norm_forward(const T* x, const T* residual, const T* weight, T* y, T* h, Acc<T>* rstd, int64_t M,
                          int N, Acc<T> eps, cudaStream_t stream) {
  norm_engine::launch_forward<T, Norm::kRms, true>(x, residual, weight, nullptr, y, h, nullptr, rstd, M, N,
                                                   eps, stream);
}

template <typename T>
void add_layer_norm_forward(const T* x, const T* residual, const T* weight, const T* bias, T* y, T* h,
                            Acc<T>* mean, Acc<T>* rstd, int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  norm_engine::launch_forward<T, Norm::kLayer, true>(x, residual, weight, bias, y, h, mean, rstd, M, N, eps,
                                                     stream);
}

template <typename T>
int64_t add_rms_norm_backward_workspace(const T* grad_y, const T* grad_h, const T* h, const T* weight,
                                        const T* grad_input, int64_t M, int N) {
  return norm_engine::backward_workspace<T, Norm::kRms>(grad_y, grad_h, h, weight, grad_input, M, N);
}

template <typename T, typename P>
void add_rms_norm_backward(const T* grad_y, const T* grad_h, const T* h, const Acc<T>* rstd, const T* weight,
                           T* grad_input, P* grad_weight, Acc<T>* workspace, int64_t M, int N,
                           cudaStream_t stream) {
  norm_engine::launch_backward<T, Norm::kRms, P>(grad_y, grad_h, h, nullptr, rstd, weight, grad_input,
                                                 grad_weight, static_cast<P*>(nullptr), workspace, M, N,
                                                 stream);
}

template <typename T>
int64_t add_layer_norm_backward_workspace(const T* grad_y, const T* grad_h, const T* h, const T* weight,
                                          const T* grad_input, int64_t M, int N) {
  return norm_engine::backward_workspace<T, Norm::kLayer>(grad_y, grad_h, h, weight, grad_input, M, N);
}

template <typename T, typename P>
void add_layer_norm_backward(const T* grad_y, const T* grad_h, const T* h, const Acc<T>* mean,
                             const Acc<T>* rstd, const T* weight, T* grad_input, P* grad_weight, P* grad_bias,
                             Acc<T>* workspace, int64_t M, int N, cudaStream_t stream) {
  norm_engine::launch_backward<T, Norm::kLayer, P>(grad_y, grad_h, h, mean, rstd, weight, grad_input,
                                                   grad_weight, grad_bias, workspace, M, N, stream);
}

#define INSTANTIATE(T)                                                                                       \
  template void add_rms_norm_forward<T>(const T*, const T*, const T*, T*, T*, Acc<T>*, int64_t, int, Acc<T>, \
                                        cudaStream_t);                                                       \
  template void add_layer_norm_forward<T>(const T*, const T*, const T*, const T*, T*, T*, Acc<T>*, Acc<T>*,  \
                                          int64_t, int, Acc<T>, cudaStream_t);                               \
  template int64_t add_rms_norm_backward_workspace<T>(const T*, const T*, const T*, const T*, const T*,      \
                                                      int64_t, int);                                         \
  template int64_t add_layer_norm_backward_workspace<T>(const T*, const T*, const T*, const T*, const T*,    \
                                                        int64_t, int);
#define INSTANTIATE_BACKWARD(T, P)                                                                         \
  template void add_rms_norm_backward<T, P>(const T*, const T*, const T*, const Acc<T>*, const T*, T*, P*, \
                                            Acc<T>*, int64_t, int, cudaStream_t);                          \
  template void add_layer_norm_backward<T, P>(const T*, const T*, const T*, const Acc<T>*, const Acc<T>*,  \
                                              const T*, T*, P*, P*, Acc<T>*, int64_t, int, cudaStream_t);
COURSE_FOR_EACH_DTYPE(INSTANTIATE)
COURSE_FOR_EACH_PARAM_PAIR(INSTANTIATE_BACKWARD)
