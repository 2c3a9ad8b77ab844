// batchnorm_relu_device.cuh: what batchnorm_relu.cu (forward) and batchnorm_relu_backward.cu share: the block
// sizes, the cache-hinted loads and stores, a Pack's values as floats, the walk over a channel's Packs in an
// NCHW tensor, the block-level merges of Welford states and sums, and the plan that cuts each channel into
// chunks. No torch headers.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "batchnorm_relu.h"
#include "batchnorm_relu_math.h"

namespace bn {

constexpr int kThreads = 256;
// Packs a thread loads before it uses any: 64 bytes in flight per thread (backward: 2 x 3 tensors' Packs)
constexpr int kUnroll = 4;
constexpr int kUnrollBackward = 2;
// A split with fewer Packs (rows) than this per thread costs more in partials than it gains in parallelism.
constexpr int64_t kMinPacksPerThread = 4;
// finalize: 8 adjacent channels a block (a 32-byte row of each partial), each merged by 32 lanes that take
// every 32nd partial
constexpr int kFinCols = 8;
constexpr int kFinLanes = 32;
constexpr bool kPdl = true;

// ------------------------------------------------------------------------------------------------
// Memory: a Pack loaded or stored with the evict-first hint, and a channel's Packs in an NCHW tensor
// ------------------------------------------------------------------------------------------------

template <int kBytes>
struct RawBits;
template <>
struct RawBits<16> {
  using type = uint4;
};
template <>
struct RawBits<8> {
  using type = uint2;
};
template <>
struct RawBits<4> {
  using type = unsigned int;
};
template <>
struct RawBits<2> {
  using type = unsigned short;
};

// Last use of x (or of grad_y, y): evict-first in L2, so that the values the next blocks still need stay.
template <typename P>
__device__ __forceinline__ P load_last_use(const P* p) {
  using R = typename RawBits<sizeof(P)>::type;
  const R bits = __ldcs(reinterpret_cast<const R*>(p));
  P v;
  memcpy(&v, &bits, sizeof(P));
  return v;
}

// y and grad_x are not read again by this op: streamed out with the evict-first hint.
template <typename P>
__device__ __forceinline__ void store_streaming(P* p, const P& v) {
  using R = typename RawBits<sizeof(P)>::type;
  R bits;
  memcpy(&bits, &v, sizeof(P));
  __stcs(reinterpret_cast<R*>(p), bits);
}

__device__ __forceinline__ float inverse(float n) { return __frcp_rn(n); }
__device__ __forceinline__ double inverse(double n) { return __drcp_rn(n); }

// A Pack's values in Acc<T>. A bfloat16 is the top half of a float, so a pair of them in a 32-bit word
// becomes two floats with a shift and a mask; converting each value alone first moves it to a register of its
// own, which took the bf16 kernels to 80-120 registers a thread (and spills) where the float16 ones needed
// 64-80.
template <typename T, int V>
struct Values {
  Acc<T> v[V];
};
template <typename T, int V>
__device__ __forceinline__ Values<T, V> values(const Pack<T, V>& p) {
  Values<T, V> out;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && V % 2 == 0) {
    unsigned words[V / 2];
    memcpy(words, &p, sizeof(p));
#pragma unroll
    for (int k = 0; k < V / 2; ++k) {
      out.v[2 * k] = __uint_as_float(words[k] << 16);
      out.v[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = to_acc(p.v[j]);
  }
  return out;
}

// The Packs of channel c of an NCHW tensor as the channel sees them: its Pack k (k < N * HWp) is Pack k % HWp
// of run k / HWp, at (run * C + c) * HWp + k % HWp in memory. A thread steps k by `stride` without dividing:
// the position in the run advances by stride % HWp and wraps into the next run at most once a step.
struct ChannelWalk {
  int64_t off, hw;  // memory offset (in Packs) of the current Pack, and its position in its run
  int64_t step_off, step_hw, wrap, hwp;
  __device__ ChannelWalk(int64_t k, int64_t stride, int64_t c, int64_t C, int64_t HWp) {
    const int64_t n = k / HWp, sn = stride / HWp;
    hw = k - n * HWp;
    off = (n * C + c) * HWp + hw;
    step_hw = stride - sn * HWp;
    step_off = sn * C * HWp + step_hw;
    wrap = (C - 1) * HWp;  // past the end of a run: over the other channels' runs of the same image
    hwp = HWp;
  }
  __device__ __forceinline__ void next() {
    hw += step_hw;
    off += step_off;
    if (hw >= hwp) {
      hw -= hwp;
      off += wrap;
    }
  }
};

// ------------------------------------------------------------------------------------------------
// Block-level merges
// ------------------------------------------------------------------------------------------------

template <typename A>
__device__ __forceinline__ Welford<A> shfl_down(const Welford<A>& w, int off) {
  return {__shfl_down_sync(0xffffffffu, w.n, off), __shfl_down_sync(0xffffffffu, w.mean, off),
          __shfl_down_sync(0xffffffffu, w.m2, off)};
}

// The Welford states of a 1-D block as one, in thread 0: warp shuffles, then one state per warp through
// shared memory. The order of the merges is fixed, so the result is the same on every run.
template <typename A>
__device__ Welford<A> block_welford(Welford<A> w) {
  __shared__ A warps[3][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int off = 16; off > 0; off /= 2) w = welford_merge(w, shfl_down(w, off));
  if (lane == 0) warps[0][warp] = w.n, warps[1][warp] = w.mean, warps[2][warp] = w.m2;
  __syncthreads();
  if (warp == 0) {
    w = lane < int(blockDim.x / 32) ? Welford<A>{warps[0][lane], warps[1][lane], warps[2][lane]}
                                    : Welford<A>{A(0), A(0), A(0)};
    for (int off = 16; off > 0; off /= 2) w = welford_merge(w, shfl_down(w, off));
  }
  return w;
}

// Channels-last: thread (tx, ty) holds V Welford slots that share the count n; the slots of the threads of
// column tx merged over ty, a fixed tree in shared memory. Thread (tx, 0) ends with its column's.
template <typename A, int V>
__device__ void column_welford(A& n, A (&mean)[V], A (&m2)[V]) {
  __shared__ A sh_n[kThreads], sh_mean[V][kThreads], sh_m2[V][kThreads];
  const int tx = threadIdx.x, ty = threadIdx.y, me = ty * blockDim.x + tx;
  for (int h = blockDim.y / 2; h > 0; h /= 2) {
    if (ty >= h && ty < 2 * h) {
      sh_n[me] = n;
#pragma unroll
      for (int j = 0; j < V; ++j) sh_mean[j][me] = mean[j], sh_m2[j][me] = m2[j];
    }
    __syncthreads();
    if (ty < h) {
      const int other = me + h * blockDim.x;
      const A nb = sh_n[other];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const Welford<A> s =
            welford_merge(Welford<A>{n, mean[j], m2[j]}, Welford<A>{nb, sh_mean[j][other], sh_m2[j][other]});
        mean[j] = s.mean;
        m2[j] = s.m2;
      }
      n += nb;
    }
    __syncthreads();
  }
}

// The same for K sums per thread (backward): thread (tx, 0) ends with its column's.
template <typename A, int K>
__device__ void column_sums(A (&v)[K]) {
  __shared__ A sh[K][kThreads];
  const int tx = threadIdx.x, ty = threadIdx.y, me = ty * blockDim.x + tx;
  for (int h = blockDim.y / 2; h > 0; h /= 2) {
    if (ty >= h && ty < 2 * h)
#pragma unroll
      for (int j = 0; j < K; ++j) sh[j][me] = v[j];
    __syncthreads();
    if (ty < h)
#pragma unroll
      for (int j = 0; j < K; ++j) v[j] += sh[j][me + h * blockDim.x];
    __syncthreads();
  }
}

// ------------------------------------------------------------------------------------------------
// The plan
// ------------------------------------------------------------------------------------------------

// The number of splits S in [1, max_splits] that finishes G * S blocks soonest, `resident` blocks at a time:
// the grid takes ceil(G * S / resident) rounds and a block's work is ~1/S, so the least rounds / S wins (on a
// tie, fewer splits: fewer partials). 256 channels on 132 SMs at 8 blocks each: S = 4, 1024 blocks in one
// round.
inline int64_t best_splits(int64_t G, int64_t resident, int64_t max_splits) {
  int64_t best = 1, best_rounds = ceil_div(G, resident);
  const int64_t limit = std::min(max_splits, 4 * ceil_div(resident, G));
  for (int64_t S = 2; S <= limit; ++S) {
    const int64_t rounds = ceil_div(G * S, resident);
    if (rounds * best < best_rounds * S) best = S, best_rounds = rounds;
  }
  return best;
}

// The cut for x [N, C, H, W] in Packs of `vec` values, when `per_sm` blocks of the reduction kernel fit on an
// SM.
inline BnPlan plan(int64_t N, int64_t C, int64_t HW, bool channels_last, int vec, int per_sm) {
  BnPlan p{};
  p.channels_last = channels_last;
  p.vec = vec;
  const int64_t resident = int64_t(num_sms()) * std::max(1, per_sm);
  int64_t units, min_units;  // what a channel's values are cut into (Packs or rows), and the fewest per split
  if (channels_last) {
    const int64_t Cp = C / p.vec;
    p.tx = 1;
    while (p.tx < 32 && p.tx < Cp) p.tx *= 2;  // whole Packs of adjacent channels across a row, up to a warp
    p.ty = kThreads / p.tx;
    p.groups = ceil_div<int64_t>(Cp, p.tx);
    units = N * HW;
    min_units = int64_t(p.ty) * kMinPacksPerThread;
  } else {
    p.tx = kThreads;
    p.ty = 1;
    p.groups = C;
    units = N * HW / p.vec;
    min_units = int64_t(kThreads) * kMinPacksPerThread;
  }
  const int64_t splits = best_splits(p.groups, resident, std::max<int64_t>(1, units / min_units));
  p.chunk = ceil_div(units, splits);
  p.splits = ceil_div(units, p.chunk);  // no empty split
  p.partials = p.splits * C;
  return p;
}

}  // namespace bn
