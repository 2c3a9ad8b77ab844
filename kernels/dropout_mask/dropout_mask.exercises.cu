// kernels/dropout_mask/dropout_mask.exercises.cu: the kernel of lesson 05 that runs the learner's
// dropout_group4 (kernels/exercises/dropout_mask.cuh) on the GPU, and its launcher (declared in
// dropout_mask.h). No torch header here, so an exercise edit recompiles this file only.
//
//   v1  dropout_mask_v1_kernel, dropout_mask_v1: one thread per group of 4 elements (one Philox call),
//       element loads and stores. The course's dropout (kernels/dropout/dropout.cu v2) moves 16-byte packs
//       and issues the loads before the Philox rounds.
#include <cmath>

#include "dropout_mask.cuh"
#include "dropout_mask.h"

namespace {

constexpr int kThreads = 256;

// v1: thread g owns group g; the elements past n enter as 0 and are not stored.
template <typename T>
__global__ void dropout_mask_v1_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, uint64_t seed,
                                       uint64_t offset, double p) {
  using acc_t = Acc<T>;
  const int64_t group = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  const int64_t first = 4 * group;
  if (first >= n) return;
  acc_t in[4], out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    in[k] = first + k < n ? to_acc(x[first + k]) : acc_t(0);
    out[k] = acc_t(NAN);  // what an unfinished exercise leaves
  }
  dropout_group4<acc_t>(in, out, seed, offset, static_cast<uint64_t>(group), p);
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (first + k < n) y[first + k] = from_acc<T>(out[k]);
}

}  // namespace

template <typename T>
void dropout_mask_v1(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, double p,
                     cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = ceil_div(ceil_div(n, int64_t(4)), int64_t(kThreads));
  dropout_mask_v1_kernel<T><<<blocks, kThreads, 0, stream>>>(x, y, n, seed, offset, p);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T) \
  template void dropout_mask_v1<T>(const T*, T*, int64_t, uint64_t, uint64_t, double, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
