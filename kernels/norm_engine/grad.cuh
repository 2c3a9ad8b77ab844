// kernels/norm_engine/grad.cuh: the norms' input gradient, written once for every backward kernel (lesson
// 03's ladder from backward v2 on, the engine, norm_dropout). Per row, with xhat = (x - mean) * rstd (mean =
// 0 for RMSNorm) and g = grad_y * w:
//
//   grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat))     (RMSNorm: mean(g) = 0)
//   grad_w = sum over rows of grad_y * xhat,  grad_b = sum over rows of grad_y
//
// The lessons' first versions (layernorm.cu's backward v1, rmsnorm.cu's backward v1, the exercise) spell the
// formula out, as the lesson derives it.
#pragma once

namespace norm_engine {

// One value of grad_x from its row's mean(g) (0 for RMSNorm) and mean(g * xhat).
template <typename acc_t>
__device__ __forceinline__ acc_t grad_x(acc_t rstd, acc_t g, acc_t mean_g, acc_t xhat, acc_t mean_gx) {
  return rstd * (g - mean_g - xhat * mean_gx);
}

// The same with rstd folded into the row's two means (mean_g_rs = mean(g) * rstd, mean_gx_rs = mean(g * xhat)
// * rstd, once per row): one multiply fewer per value, for backward_bulk_kernel's pass over shared memory.
template <typename acc_t>
__device__ __forceinline__ acc_t grad_x_prescaled(acc_t rstd, acc_t g, acc_t mean_g_rs, acc_t xhat,
                                                  acc_t mean_gx_rs) {
  return rstd * g - mean_g_rs - xhat * mean_gx_rs;
}

}  // namespace norm_engine
