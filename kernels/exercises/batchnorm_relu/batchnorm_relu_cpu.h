// batchnorm_relu_cpu.h: the CPU loops of batchnorm_relu.cpu.cpp, as batchnorm_relu.cpp sees them. Plain C++
// on raw pointers (no torch headers, so an edit recompiles that small file alone). T is float, double,
// c10::Half or c10::BFloat16; the math runs in BnAcc<T>: double for double, float for the others. The
// parameters, the statistics and the running statistics are BnAcc<T> arrays of C values.
//
// Two layouts of x [N, C, H, W], HW = H * W, M = N * HW values per channel:
//   NCHW            channel c is N runs of HW contiguous values: run n starts at (n * C + c) * HW
//   channels-last   x is a [M, C] matrix (row r = pixel r, column c = channel c): channel c is a column
// batchnorm_relu.cpp splits the work over threads (at::parallel_for): NCHW by channel (or by run, for the
// elementwise loops), channels-last by blocks of rows, each block's statistics a partial merged afterwards.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>

template <typename T>
using BnAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Statistics: mean[c] and m2[c] (the sum of squared deviations from the mean) of channels [c_begin, c_end).
template <typename T>
void bn_stats_nchw_cpu(const T* x, int64_t N, int64_t C, int64_t HW, int64_t c_begin, int64_t c_end,
                       BnAcc<T>* mean, BnAcc<T>* m2);

// Statistics of rows [r_begin, r_end) of a channels-last x, every channel: mean[c] and m2[c] of those rows
// only (a partial of r_end - r_begin values per channel).
template <typename T>
void bn_stats_cl_cpu(const T* x, int64_t C, int64_t r_begin, int64_t r_end, BnAcc<T>* mean, BnAcc<T>* m2);

// Channels [c_begin, c_end): the partials p = 0 .. parts - 1 (rows [p * rows, min(M, (p + 1) * rows)), their
// means at part_mean[p * C + c]) merged in order into mean[c], m2[c].
template <typename A>
void bn_merge_cpu(const A* part_mean, const A* part_m2, int64_t parts, int64_t rows, int64_t M, int64_t C,
                  int64_t c_begin, int64_t c_end, A* mean, A* m2);

// Channels [c_begin, c_end): sum[c] = the partials part[p * C + c], p = 0 .. parts - 1, added in order.
template <typename A>
void bn_sum_partials_cpu(const A* part, int64_t parts, int64_t C, int64_t c_begin, int64_t c_end, A* sum);

// From each channel's mean and m2 over M values: rstd, and the running statistics updated in place.
template <typename A>
void bn_finalize_cpu(const A* mean, const A* m2, int64_t M, int64_t C, A momentum, A eps, A* rstd,
                     A* running_mean, A* running_var);

// y = relu((x - mean) * rstd * weight + bias): NCHW runs [begin, end) (run n * C + c), or channels-last rows.
template <typename T>
void bn_apply_nchw_cpu(const T* x, T* y, const BnAcc<T>* mean, const BnAcc<T>* rstd, const BnAcc<T>* weight,
                       const BnAcc<T>* bias, int64_t C, int64_t HW, int64_t begin, int64_t end);
template <typename T>
void bn_apply_cl_cpu(const T* x, T* y, const BnAcc<T>* mean, const BnAcc<T>* rstd, const BnAcc<T>* weight,
                     const BnAcc<T>* bias, int64_t C, int64_t begin, int64_t end);

// Backward's two sums: sum_g[c] = sum(g), sum_gx[c] = sum(g * (x - mean)), g = grad_y * (y > 0): NCHW
// channels [c_begin, c_end), or channels-last rows [r_begin, r_end) (partials, as bn_stats_cl_cpu).
template <typename T>
void bn_backward_sums_nchw_cpu(const T* grad_y, const T* y, const T* x, const BnAcc<T>* mean, int64_t N,
                               int64_t C, int64_t HW, int64_t c_begin, int64_t c_end, BnAcc<T>* sum_g,
                               BnAcc<T>* sum_gx);
template <typename T>
void bn_backward_sums_cl_cpu(const T* grad_y, const T* y, const T* x, const BnAcc<T>* mean, int64_t C,
                             int64_t r_begin, int64_t r_end, BnAcc<T>* sum_g, BnAcc<T>* sum_gx);

// From each channel's two sums: grad_weight = rstd * sum_gx, grad_bias = sum_g, and the coefficients k, p, q
// of grad_x (batchnorm_relu_math.h's BnGrad, as three arrays).
template <typename A>
void bn_backward_finalize_cpu(const A* sum_g, const A* sum_gx, const A* weight, const A* rstd, int64_t M,
                              int64_t C, A* grad_weight, A* grad_bias, A* k, A* p, A* q);

// grad_x from each channel's coefficients (batchnorm_relu_math.h's BnGrad, as arrays k, p, q): NCHW runs or
// channels-last rows [begin, end).
template <typename T>
void bn_backward_apply_nchw_cpu(const T* grad_y, const T* y, const T* x, const BnAcc<T>* mean,
                                const BnAcc<T>* k, const BnAcc<T>* p, const BnAcc<T>* q, T* grad_x, int64_t C,
                                int64_t HW, int64_t begin, int64_t end);
template <typename T>
void bn_backward_apply_cl_cpu(const T* grad_y, const T* y, const T* x, const BnAcc<T>* mean,
                              const BnAcc<T>* k, const BnAcc<T>* p, const BnAcc<T>* q, T* grad_x, int64_t C,
                              int64_t begin, int64_t end);
