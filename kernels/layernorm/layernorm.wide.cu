// kernels/layernorm/layernorm.wide.cu: LayerNorm's forward on the norm engine (kernels/norm_engine/,
// Norm::kLayer), for the shapes the op's route (layernorm.route.cu, by layernorm.h's EngineRoute) sends
// there (backward in layernorm.wide_backward.cu: two files, so that they compile side by side).
//
// Lesson 03's ladder holds a row in registers up to 8192 values; its long-row kernels
// (forward_v3_long_kernel, the backward pair backward_v2_long_dx_kernel + column_partials_kernel) read the
// row twice: 59-64 % of a copy forward and ~40 % backward at N = 32768 and 65536 on the H100. The engine,
// written once for RMSNorm and LayerNorm, has the paths long rows need: 32 values per thread in registers, a
// thread block cluster per row on sm_90, and on sm_90 rows by bulk copy over a cluster of 1-8 blocks
// (backward_bulk_kernel: 79-81 % of a copy for float32 N = 16384-65536; forward_bulk_kernel: float32 256 x
// 65536 69 -> 84-86 %). It also wins on small batches (the weights loaded with the row, several short rows
// per row group), as EngineRoute says.
//
//   layernorm_forward_wide             norm_engine::launch_forward<T, Norm::kLayer, false>
//   layernorm_forward_one_wave         whether its grid for rows in registers is one wave (small batches)
//   layernorm_forward_short_rows       whether it takes several short rows per row group (many-wave batches)
//   (in layernorm.wide_backward.cu:)
//   layernorm_backward_wide_workspace  norm_engine::backward_workspace<T, Norm::kLayer>
//   layernorm_backward_wide            norm_engine::launch_backward<T, Norm::kLayer, T>: grad_x, then
//                                      the partial column sums added into grad_weight and grad_bias in a
//                                      fixed order
//   layernorm_backward_wide_kernel     the name of the backward kernel its plan picks (describe_backward)
#include "layernorm.h"
#include "norm_engine/engine.cuh"

using norm_engine::Norm;

template <typename T>
void layernorm_forward_wide(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                            int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  norm_engine::launch_forward<T, Norm::kLayer, false>(x, nullptr, weight, bias, y, nullptr, mean, rstd, M, N,
                                                      eps, stream);
}

template <typename T>
bool layernorm_forward_one_wave(int64_t M, int N) {
  constexpr int V = kPack16<T>;
  return norm_engine::forward_one_wave<V, 16 / V>(M,
                                                  N);  // the kernel launch_forward runs for rows up to 8192
}

template <typename T>
bool layernorm_forward_short_rows(int64_t M, int N) {
  return norm_engine::forward_short_rows<T>(M, N) > 1;
}

#define INSTANTIATE(T)                                                                                      \
  template void layernorm_forward_wide<T>(const T*, const T*, const T*, T*, Acc<T>*, Acc<T>*, int64_t, int, \
                                          Acc<T>, cudaStream_t);                                            \
  template bool layernorm_forward_one_wave<T>(int64_t, int);                                                \
  template bool layernorm_forward_short_rows<T>(int64_t, int);
INSTANTIATE(float)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
