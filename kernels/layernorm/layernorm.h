// kernels/layernorm/layernorm.h: the launchers of kernels/layernorm/layernorm.cu, as the .cpp sees them.
// Raw pointers and a stream in, nothing from torch. T is float, double, __half or __nv_bfloat16; the
// math and the saved statistics are Acc<T> (float, or double for double). x, y, grad_y and grad_x are
// [M, N] row-major; weight, bias and their gradients are [N]; mean and rstd are [M].
#pragma once

#include "common/common.h"
#include "layernorm_choices.h"

// Forward: y = (x - mean) * rstd * weight + bias, row by row; writes mean and rstd for backward.
template <typename T>
void layernorm_forward_v1(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                          int64_t M, int N, Acc<T> eps, cudaStream_t stream);
// v2 (in layernorm.exercises.cu) runs the exercise's warp_sum (kernels/exercises/layernorm_warp_reduce.cuh).
template <typename T>
void layernorm_forward_v2(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                          int64_t M, int N, Acc<T> eps, cudaStream_t stream);
// v3: `kernel` picks the row-in-registers kernel or the pipelined one (layernorm_choices.h); kAuto, the
// fastest measured on this GPU, is what the lesson runs.
template <typename T>
void layernorm_forward_v3(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                          int64_t M, int N, Acc<T> eps, cudaStream_t stream,
                          ForwardKernel kernel = ForwardKernel::kAuto);

// Backward: grad_x, grad_weight and grad_bias from grad_y, x, the saved mean and rstd, and weight.
template <typename T>
void layernorm_backward_v1(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                           const T* weight, T* grad_x, T* grad_weight, T* grad_bias, int64_t M, int N,
                           cudaStream_t stream);

// Backward v1's grad_x alone (in layernorm.exercises.cu: it runs the exercise's layernorm_backward_row_warp,
// kernels/exercises/layernorm_backward_row.cuh); layernorm_backward_v1 calls it, then sums the columns.
template <typename T>
void layernorm_backward_v1_dx(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                              const T* weight, T* grad_x, int64_t M, int N, cudaStream_t stream);

// v2: `kernel` picks two kernels (the lesson's) or one of the one-kernel endings of layernorm.hopper.cu
// (layernorm_choices.h). It needs a scratch buffer of layernorm_backward_v2_workspace(...) values of
// Acc<T> (per-block partial column sums); call it with the same pointers, sizes and kernel as the launch.
template <typename T>
int64_t layernorm_backward_v2_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                        int64_t M, int N, BackwardKernel kernel = BackwardKernel::kAuto);
template <typename T>
void layernorm_backward_v2(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                           const T* weight, T* grad_x, T* grad_weight, T* grad_bias, Acc<T>* workspace,
                           int64_t M, int N, cudaStream_t stream,
                           BackwardKernel kernel = BackwardKernel::kAuto);

// Lesson 05's norm kernels (rmsnorm_common.cuh, Norm::kLayer; layernorm.wide.cu), which layernorm_forward_v3
// and layernorm_backward_v2 run for float, half and bf16 when `kernel` is kAuto:
// - forward: rows longer than kWideFrom, and 2-byte vectorizable rows longer than LAYERNORM_WIDE_FWD_FROM
//   (2048: rows of 4096 and 8192), which lesson 05's forward_kernel holds in registers as forward v3 does,
//   the same sums in the same order (the same bits; its blocks and its loads of the weight and bias differ).
//   bf16, H100, A/Bs in one process (2026-11-27, three hosts, % of a copy;
//   results/h100/layernorm_forward_routing_2026-11-27.md): 2048x8192 89.1 / 92.2 / 90.6 -> 97.2 / 95.4 / 94.3
//   %, 8192x8192 94.8 / 95.8 -> 97.7 / 97.4 %; 4096x4096 within the spread (92.3 -> 96.3 and 93.6 -> 93.9 %
//   in two A/Bs; in notebook 03b's four runs from 1.4 points behind the pipelined kernel to 1.4 ahead).
//   float32 stays: 0.95-1.04x (512x8192 lost 4-5 % in two runs of three);
// - backward: rows longer than kWideFrom, except 2-byte rows shorter than 16384, which stay with lesson 03's
//   kernels (its bulk-copy kernel: 79-84 % of a copy at N <= 8192); at bf16 1024x16384 lesson 03's
//   measured 62.0 %, lesson 05's backward_bulk_kernel 76.1 % once its exchange stopped waiting for the row's
//   stores (results/h100/norm_backward_exchange_2026-11-27.md); and any batch of at most LAYERNORM_FEW_BYTES
//   bytes of x (among them every batch of up to 8 rows that the long-row rule leaves to lesson 03): at
//   1x4096 lesson 03's one cooperative block, its grid barrier and partial row took 15.6 us (float32;
//   native's kernel 12.2), lesson 05's row group and a plain kernel adding its partial row 11.0 us
//   (rmsnorm_forward_bulk_2026-11-26.md); up to 1 MiB of x lesson 05's were 1.00-1.36x faster (bfloat16
//   64x1024 11.1 -> 9.8 us; float32 64x4096 13.1 -> 12.0 us), at 2 MiB 0.93-1.12x
//   (results/h100/rmsnorm_small_backward_2026-11-27.md).
#ifndef LAYERNORM_FEW_BYTES
#define LAYERNORM_FEW_BYTES (1 << 20)
#endif
#ifndef LAYERNORM_WIDE_BWD_2BYTE_FROM
#define LAYERNORM_WIDE_BWD_2BYTE_FROM 16384
#endif
constexpr int kWideFrom = 8192;
inline bool wide_rows(int N, bool automatic) { return automatic && N > kWideFrom; }
// Forward: rows longer than kWideFrom, and vectorizable batches of one wave (layernorm_forward_one_wave, in
// layernorm.wide.cu): there lesson 05's forward_kernel loads the weight and bias with the row (nothing else
// runs to hide a second trip to memory after the sums), lesson 03's forward v3 after the sums. Kernel time on
// the H100 (torch.profiler, L2 flushed): bf16 1 x 4096 3.5 -> 2.8 us, 128 x 8192 4.8 -> 4.5 us, 256 x 4096
// 4.5 -> 4.2 us; float32 within 0.1 us (results/h100/norm_small_forward_2026-11-27.md). And short rows of
// many-wave batches (layernorm_forward_short_rows: several rows per row group, rmsnorm_common.cuh's
// forward_short_rows): bf16 65536 x 256 91.6 -> 96.2 %, float32 16384 x 256 88.3 -> 97.7 % of a copy
// (results/h100/norm_short_rows_2026-11-27.md).
template <typename T>
bool layernorm_forward_one_wave(int64_t M, int N);
template <typename T>
bool layernorm_forward_short_rows(int64_t M, int N);
#ifndef LAYERNORM_WIDE_FWD_FROM
// (0: every vectorizable 2-byte row; not better at 2048 and below)
#define LAYERNORM_WIDE_FWD_FROM 2048
#endif
template <typename T>
bool lesson05_forward(int64_t M, int N, bool vec, bool automatic) {
  return wide_rows(N, automatic) ||
         (automatic && vec && N <= kWideFrom &&
          ((sizeof(T) == 2 && N > LAYERNORM_WIDE_FWD_FROM) || layernorm_forward_one_wave<T>(M, N) ||
           layernorm_forward_short_rows<T>(M, N)));
}
template <typename T>
bool lesson05_backward(int64_t M, int N, bool automatic) {
  return automatic && (M * N * int64_t(sizeof(T)) <= LAYERNORM_FEW_BYTES ||
                       (wide_rows(N, automatic) && (sizeof(T) >= 4 || N >= LAYERNORM_WIDE_BWD_2BYTE_FROM)));
}
template <typename T>
void layernorm_forward_wide(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                            int64_t M, int N, Acc<T> eps, cudaStream_t stream);
template <typename T>
int64_t layernorm_backward_wide_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                          int64_t M, int N);
template <typename T>
void layernorm_backward_wide(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                             const T* weight, T* grad_x, T* grad_weight, T* grad_bias, Acc<T>* workspace,
                             int64_t M, int N, cudaStream_t stream);
