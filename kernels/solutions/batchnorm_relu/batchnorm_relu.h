// batchnorm_relu.h: the CUDA launchers of batchnorm_relu.cu, as batchnorm_relu.cpp sees them. Raw pointers
// and a stream in, nothing from torch, so that an edit to the kernels recompiles batchnorm_relu.cu alone.
//
// x, y, grad_y, grad_x are [N, C, H, W] with HW = H * W, all in one layout: contiguous NCHW, or channels-last
// (a [N * HW, C] matrix). T is float, double, __half or __nv_bfloat16; the parameters, statistics and the
// workspace are Acc<T> (float, or double for double). The caller guarantees N * HW > 0 and C > 0.
#pragma once

#include "common/common.h"

// How the work is cut, the same for the forward's (or the backward's) three kernels: `groups` blocks cover
// the channels (NCHW: one block per channel; channels-last: one per `tx * vec` adjacent channels), and each
// channel's values are cut into `splits` chunks of `chunk` Packs (NCHW) or rows (channels-last), one block
// each.
struct BnPlan {
  bool channels_last;
  int vec;           // values per Pack: 16 bytes' worth when the layout and the pointers allow it, else 1
  int tx, ty;        // block shape: NCHW (256, 1); channels-last tx threads across a row, ty rows
  int64_t groups;    // blocks per split
  int64_t splits;    // blocks per channel (group): each writes one partial per channel
  int64_t chunk;     // Packs (NCHW) or rows (channels-last) per split
  int64_t partials;  // splits * C: the workspace holds 3 (forward) or 2 (backward) arrays of this many Acc<T>
};

// The plans of the forward (batchnorm_relu.cu) and the backward (batchnorm_relu_backward.cu): each sizes the
// chunks for its own reduction kernel's occupancy. vectorized: 16-byte Packs allowed (H * W, for NCHW, or C,
// for channels-last, a multiple of the Pack's width, and every tensor's data 16-byte aligned).
template <typename T>
BnPlan batchnorm_relu_forward_plan_cuda(int64_t N, int64_t C, int64_t HW, bool channels_last,
                                        bool vectorized);
template <typename T>
BnPlan batchnorm_relu_backward_plan_cuda(int64_t N, int64_t C, int64_t HW, bool channels_last,
                                         bool vectorized);

// Forward: y, mean and rstd written, running_mean and running_var updated in place. workspace: 3 *
// plan.partials.
template <typename T>
void batchnorm_relu_forward_cuda(const T* x, const Acc<T>* weight, const Acc<T>* bias, T* y, Acc<T>* mean,
                                 Acc<T>* rstd, Acc<T>* running_mean, Acc<T>* running_var, Acc<T>* workspace,
                                 const BnPlan& plan, int64_t N, int64_t C, int64_t HW, Acc<T> momentum,
                                 Acc<T> eps, cudaStream_t stream);

// Backward: grad_x, grad_weight and grad_bias written. workspace: 2 * plan.partials.
template <typename T>
void batchnorm_relu_backward_cuda(const T* grad_y, const T* y, const T* x, const Acc<T>* weight,
                                  const Acc<T>* mean, const Acc<T>* rstd, T* grad_x, Acc<T>* grad_weight,
                                  Acc<T>* grad_bias, Acc<T>* workspace, const BnPlan& plan, int64_t N,
                                  int64_t C, int64_t HW, cudaStream_t stream);
