// kernels/half_dispatch/half_dispatch.exercises.cu: the kernel of lesson 05 that runs the third exercise on
// the GPU (kernels/exercises/half_dispatch.cuh: dispatch() picks the types, sum_squares() sums a lane's
// elements), and its launcher (declared in half_dispatch.h). No torch header here, so an exercise edit
// recompiles this file only.
//
//   v1  half_dispatch_v1_kernel, half_dispatch_v1: one warp per row, 8 rows per block of 256 threads; lane l
//       sums elements l, l + 32, ... (32 neighbours: one coalesced transaction per step), and five
//       shuffles add the 32 partial sums in the same type A, so a float16 A rounds there too.
#include "common/common.h"
#include "half_dispatch.cuh"
#include "half_dispatch.h"

namespace {

constexpr int kThreads = 256;  // 8 rows per block

__device__ __forceinline__ float shfl_xor(float v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ double shfl_xor(double v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
template <typename H>  // Half, BFloat16: move the 16 bits
__device__ __forceinline__ H shfl_xor(H v, int offset) {
  H out;
  out.bits = static_cast<uint16_t>(__shfl_xor_sync(0xffffffffu, static_cast<unsigned>(v.bits), offset));
  return out;
}

// v1: warp w of the grid owns row w; sum_squares (the exercise) gives each lane its partial sum.
template <typename T, typename A>
__global__ void half_dispatch_v1_kernel(const T* __restrict__ x, Stat<T>* __restrict__ out, int64_t M,
                                        int N) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  if (row >= M) return;  // the whole warp leaves together
  const int lane = threadIdx.x % 32;
  A sum = A(float_of(0x7fc00000u));  // NaN: what an unwritten sum leaves
  sum_squares<T, A>(x + row * N, N, lane, 32, &sum);
  for (int offset = 16; offset > 0; offset /= 2) sum += shfl_xor(sum, offset);
  if (lane == 0) out[row] = static_cast<Stat<T>>(sum) / static_cast<Stat<T>>(N);
}

template <typename T, typename A>
void launch_v1(const void* x, void* out, int64_t M, int N, cudaStream_t stream) {
  half_dispatch_v1_kernel<T, A><<<ceil_div<int64_t>(M, kThreads / 32), kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<Stat<T>*>(out), M, N);
  COURSE_LAUNCH_CHECK();
}

}  // namespace

bool half_dispatch_v1(DType dtype, const void* x, void* out, int64_t M, int N, bool sum_in_dtype,
                      cudaStream_t stream) {
  return dispatch(dtype, [&](auto t, auto a) {
    using T = decltype(t);
    using A = decltype(a);
    if (M == 0) return;
    if (sum_in_dtype)
      launch_v1<T, T>(x, out, M, N, stream);
    else
      launch_v1<T, A>(x, out, M, N, stream);
  });
}
