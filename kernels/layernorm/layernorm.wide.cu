// kernels/layernorm/layernorm.wide.cu: LayerNorm's rows longer than 8192 and the other shapes layernorm.h
// lists, with lesson 05's kernels (forward here, backward in layernorm.wide_backward.cu: two files, so that
// they compile side by side).
//
// Lesson 03's kernels hold a row in registers up to 8192 values (forward v3, backward v2); longer rows took
// forward_v3_long_kernel (Welford's one pass, then the row read again) and the backward pair
// backward_v2_long_dx_kernel + column_partials_kernel (x and grad_y read twice), which measured 59-64 % of a
// copy forward and ~40 % backward at N = 32768 and 65536 on the H100 (results/h100/, 2026-11-26). Lesson 05
// wrote the norm kernels once for RMSNorm and LayerNorm (rmsnorm_common.cuh, Norm::kLayer), with the paths
// long rows need: 32 values per thread in registers, one block per row with the row in shared memory, a
// thread block cluster per row on sm_90 (forward), and on sm_90 the rows by bulk copy over a cluster of
// 1-8 blocks (backward_bulk_kernel: 79-81 % of a copy for float32 N = 16384-65536; forward_bulk_kernel:
// float32 512x32768 83 -> 88-89 %, 256x65536 69 -> 84-86 %). These files instantiate them for
// course::layer_norm; layernorm.cu's kAuto sends such rows here (layernorm.h: lesson05_forward,
// lesson05_backward), and small batches: the backward of at most 1 MiB of x (lesson 03's cooperative
// kernels, their grid barrier and set-up, were slower there), the forward of one wave of rows (forward_kernel
// loads the weight and bias with the row there), of short rows in many waves (several rows per row group:
// rmsnorm_common.cuh's forward_short_rows) and of 2-byte rows of 4096 and 8192 (layernorm.h). A kernel asked
// for by name keeps lesson 03's, and so does double, which no benchmark times.
//
//   layernorm_forward_wide             rmsnorm::launch_forward<T, Norm::kLayer, false>
//   layernorm_forward_one_wave         whether its grid for rows in registers is one wave (small batches)
//   layernorm_forward_short_rows       whether it takes several short rows per row group (many-wave batches)
//   (in layernorm.wide_backward.cu:)
//   layernorm_backward_wide_workspace  rmsnorm::backward_workspace<T, Norm::kLayer>
//   layernorm_backward_wide            rmsnorm::launch_backward<T, Norm::kLayer, T>: grad_x, then the
//                                      partial column sums added into grad_weight and grad_bias in a fixed
//                                      order
#include "layernorm.h"
#include "norm_engine/rmsnorm_common.cuh"

using rmsnorm::Norm;

template <typename T>
void layernorm_forward_wide(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                            int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  rmsnorm::launch_forward<T, Norm::kLayer, false>(x, nullptr, weight, bias, y, nullptr, mean, rstd, M, N, eps,
                                                  stream);
}

template <typename T>
bool layernorm_forward_one_wave(int64_t M, int N) {
  constexpr int V = kPack16<T>;
  return rmsnorm::forward_one_wave<V, 16 / V>(M, N);  // the kernel launch_forward runs for rows up to 8192
}

template <typename T>
bool layernorm_forward_short_rows(int64_t M, int N) {
  return rmsnorm::forward_short_rows<T>(M, N) > 1;
}

#define INSTANTIATE(T)                                                                                      \
  template void layernorm_forward_wide<T>(const T*, const T*, const T*, T*, Acc<T>*, Acc<T>*, int64_t, int, \
                                          Acc<T>, cudaStream_t);                                            \
  template bool layernorm_forward_one_wave<T>(int64_t, int);                                                \
  template bool layernorm_forward_short_rows<T>(int64_t, int);
INSTANTIATE(float)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
