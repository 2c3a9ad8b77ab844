// kernels/layernorm/layernorm.h: the launchers of kernels/layernorm/layernorm.cu, as the .cpp sees them.
// Raw pointers and a stream in, nothing from torch. T is float, double, __half or __nv_bfloat16; the
// math and the saved statistics are Acc<T> (float, or double for double). x, y, grad_y and grad_x are
// [M, N] row-major; weight, bias and their gradients are [N]; mean and rstd are [M].
#pragma once

#include <cstdint>
#include <string>

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
// ladder's fastest measured on this GPU, is what the lesson runs.
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

// The op (course::layer_norm, layernorm.cpp's registered kernels) runs these three; layernorm.route.cu's
// header is the table of which kernels they run: the norm engine (kernels/norm_engine/, Norm::kLayer,
// launched by layernorm.wide.cu and layernorm.wide_backward.cu) where EngineRoute says so, else the ladder
// above with kAuto (forward v3, backward v2). Lesson 03's forward(version=3) and backward(version=2) are the
// ladder alone. Workspace as for backward v2: call it with the same pointers and sizes as the launch.
template <typename T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                       int64_t M, int N, Acc<T> eps, cudaStream_t stream);
template <typename T>
int64_t layernorm_backward_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x, int64_t M,
                                     int N);
template <typename T>
void layernorm_backward(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd, const T* weight,
                        T* grad_x, T* grad_weight, T* grad_bias, Acc<T>* workspace, int64_t M, int N,
                        cudaStream_t stream);
// The kernels the op runs for x of M rows of N (fresh weight, bias and outputs: 16-byte aligned), named as
// the route decides them: "norm engine: ..." or "ladder: ..." (layernorm.route.cu).
template <typename T>
std::string layernorm_describe(const T* x, int64_t M, int N, bool backward);

// Where the op runs the norm engine instead of the ladder: float, half and bf16 only (double, which no
// benchmark times, keeps the ladder). norm_engine/engine.cuh's table says which engine kernel then runs. The
// thresholds, each with its reason (H100, % of a copy):
struct EngineRoute {
  // Rows longer than 8192: the ladder holds at most 8192 values in registers, and its long-row kernels read
  // the row twice (59-64 % forward, ~40 % backward at N = 32768; the engine's 79-89 %).
  int wide_from = 8192;
  // Forward of 2-byte vectorizable rows above 2048 (4096, 8192): the engine's forward_kernel holds them in
  // registers as forward v3 does, the same sums in the same order (the same bits), with its own blocks and
  // parameter loads: bf16 2048 x 8192 89-92 -> 94-97 %; not better at 2048 and below; float stays
  // (0.95-1.04x).
  int fwd_2byte_from = 2048;
  // Backward of 2-byte rows: the engine from 16384 (bf16 1024 x 16384 62 -> 76 %); below it the ladder's
  // bulk-copy kernel does 79-84 %.
  int bwd_2byte_from = 16384;
  // Backward of any batch of at most 1 MiB of x: the ladder's one-kernel endings pay a grid barrier and
  // set-up that the engine's row kernel plus a plain kernel adding its partial rows do not (1.00-1.36x
  // faster; float 1 x 4096 15.6 -> 11.0 us).
  int64_t bwd_few_bytes = int64_t(1) << 20;
};
inline constexpr EngineRoute kEngineRoute{};
constexpr int kWideFrom = kEngineRoute.wide_from;
// The forward also takes vectorizable batches of one wave (layernorm_forward_one_wave: the engine loads the
// weight and bias with the row, where nothing else runs to hide a second trip to memory after the sums; bf16
// 1 x 4096 3.5 -> 2.8 us) and short rows in many waves (layernorm_forward_short_rows: several rows per row
// group; bf16 65536 x 256 91.6 -> 96.2 %, float 16384 x 256 88.3 -> 97.7 %). Both in layernorm.wide.cu.
template <typename T>
bool layernorm_forward_one_wave(int64_t M, int N);
template <typename T>
bool layernorm_forward_short_rows(int64_t M, int N);
template <typename T>
bool engine_runs_forward(int64_t M, int N, bool vec) {
  return N > kWideFrom ||
         (vec && ((sizeof(T) == 2 && N > kEngineRoute.fwd_2byte_from) ||
                  layernorm_forward_one_wave<T>(M, N) || layernorm_forward_short_rows<T>(M, N)));
}
template <typename T>
bool engine_runs_backward(int64_t M, int N) {
  return M * N * int64_t(sizeof(T)) <= kEngineRoute.bwd_few_bytes ||
         (N > kWideFrom && (sizeof(T) >= 4 || N >= kEngineRoute.bwd_2byte_from));
}
// The engine's launchers (layernorm.wide.cu, layernorm.wide_backward.cu); layernorm_backward_wide_kernel
// names the backward kernel its plan picks (norm_engine::describe_backward).
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
template <typename T>
const char* layernorm_backward_wide_kernel(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                           int64_t M, int N);
