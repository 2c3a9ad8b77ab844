// kernels/layernorm/layernorm.route.cu: the op's choice of kernels, in one place. course::layer_norm (the
// registered kernels of layernorm.cpp) calls these launchers; lesson 03's forward(version=3) and
// backward(version=2) call the ladder's (layernorm.cu) and never come here.
//
// What the op runs (M rows of N; vec: N a multiple of a 16-byte pack and every pointer 16-byte aligned). The
// thresholds are layernorm.h's EngineRoute, each with its reason there; the first line that fits decides:
//
//   direction  dtype              shape                                              runs
//   forward    float, half, bf16  N > 8192 (wide_from)                               norm engine
//              half, bf16         vec, N > 2048 (fwd_2byte_from)                     norm engine
//              float, half, bf16  vec, the engine's grid for the rows is one wave    norm engine
//              float, half, bf16  vec, short rows in many waves (several per group)  norm engine
//              any                otherwise (double: always)                         ladder: forward v3,
//              kAuto
//   backward   float, half, bf16  at most 1 MiB of x (bwd_few_bytes)                 norm engine
//              float              N > 8192 (wide_from)                               norm engine
//              half, bf16         N >= 16384 (bwd_2byte_from)                        norm engine
//              any                otherwise (double: always)                         ladder: backward v2,
//              kAuto
//
// "norm engine" is layernorm.wide.cu (forward) and layernorm.wide_backward.cu (backward); which of its
// kernels runs is norm_engine/engine.cuh's table. "ladder" is layernorm_forward_v3 / layernorm_backward_v2
// with kAuto; which of its kernels runs is layernorm_choices.h's. The predicates are engine_runs_forward
// and engine_runs_backward (layernorm.h); layernorm_describe names the choice for Python (the module's
// describe) from the same predicates.
#include <string>

#include "layernorm.h"
#include "norm_engine/occupancy.h"

namespace {

// The dtype rule, once: double has no engine launchers (layernorm.wide.cu instantiates float, half, bf16).
template <typename T>
bool forward_on_engine(const T* x, const T* weight, const T* bias, const T* y, int64_t M, int N) {
  if constexpr (sizeof(T) <= 4)
    return engine_runs_forward<T>(M, N, norm_engine::vectorizable<T>(N, {x, weight, bias, y}));
  return false;
}

template <typename T>
bool backward_on_engine(int64_t M, int N) {
  if constexpr (sizeof(T) <= 4) return engine_runs_backward<T>(M, N);
  return false;
}

}  // namespace

template <typename T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                       int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  if constexpr (sizeof(T) <= 4)  // here and below: so that double names no engine launcher
    if (forward_on_engine<T>(x, weight, bias, y, M, N))
      return layernorm_forward_wide<T>(x, weight, bias, y, mean, rstd, M, N, eps, stream);
  layernorm_forward_v3<T>(x, weight, bias, y, mean, rstd, M, N, eps, stream, ForwardKernel::kAuto);
}

template <typename T>
int64_t layernorm_backward_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x, int64_t M,
                                     int N) {
  if constexpr (sizeof(T) <= 4)
    if (backward_on_engine<T>(M, N))
      return layernorm_backward_wide_workspace<T>(grad_y, x, weight, grad_x, M, N);
  return layernorm_backward_v2_workspace<T>(grad_y, x, weight, grad_x, M, N, BackwardKernel::kAuto);
}

template <typename T>
void layernorm_backward(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd, const T* weight,
                        T* grad_x, T* grad_weight, T* grad_bias, Acc<T>* workspace, int64_t M, int N,
                        cudaStream_t stream) {
  if constexpr (sizeof(T) <= 4)
    if (backward_on_engine<T>(M, N))
      return layernorm_backward_wide<T>(grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias,
                                        workspace, M, N, stream);
  layernorm_backward_v2<T>(grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias, workspace, M, N,
                           stream, BackwardKernel::kAuto);
}

// The other pointers are taken as aligned (nullptr is): fresh tensors are.
template <typename T>
std::string layernorm_describe(const T* x, int64_t M, int N, bool backward) {
  if (!backward)
    return forward_on_engine<T>(x, nullptr, nullptr, nullptr, M, N)
               ? "norm engine: launch_forward (norm_engine/engine.cuh's table)"
               : "ladder: forward v3, kAuto (layernorm_choices.h)";
  if constexpr (sizeof(T) <= 4)
    if (backward_on_engine<T>(M, N))
      return std::string("norm engine: ") +
             layernorm_backward_wide_kernel<T>(nullptr, x, nullptr, nullptr, M, N);
  return "ladder: backward v2, kAuto (layernorm_choices.h)";
}

#define INSTANTIATE(T)                                                                                    \
  template void layernorm_forward<T>(const T*, const T*, const T*, T*, Acc<T>*, Acc<T>*, int64_t, int,    \
                                     Acc<T>, cudaStream_t);                                               \
  template int64_t layernorm_backward_workspace<T>(const T*, const T*, const T*, const T*, int64_t, int); \
  template void layernorm_backward<T>(const T*, const T*, const Acc<T>*, const Acc<T>*, const T*, T*, T*, \
                                      T*, Acc<T>*, int64_t, int, cudaStream_t);                           \
  template std::string layernorm_describe<T>(const T*, int64_t, int, bool);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
