// kernels/norm_engine/row.cuh: a row's values in registers, the primitives every norm kernel is built from
// (lesson 03's LayerNorm ladder, the norm engine, norm_dropout). Device code only; no torch header.
//
//   rsqrt_acc               1 / sqrt in Acc<T> (float or double)
//   Raw                     N values of T kept as raw 32-bit words: one full-width load or store, and
//                           half the registers of a Pack of 2-byte values held across a loop
//   to_pack, as_raw         Acc<T> values rounded back to T (two at a time for half/bf16); a Pack as a Raw
//   lane_sum, group_sum     sums over a warp (shuffles) and over a row group (shuffles, then shared memory),
//                           added in a fixed order: the same bits on every run
//   load_input, store_y     the engine's loads of a pack of the input (x, or x + residual rounded to T and
//                           written to h) and the one place its kernels write y
//   opaque                  a pack's words hidden from the optimizer for one use
#pragma once

#include <type_traits>

#include "common/common.h"

namespace norm_engine {

__device__ __forceinline__ float rsqrt_acc(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_acc(double v) { return rsqrt(v); }

// N values of T kept as raw 32-bit words. A Pack<__nv_bfloat16, 8> held across a loop gets split by the
// compiler into eight 16-bit registers; as four words it takes four, which is what lets backward v2 keep
// two rows of x and grad_y in registers. Loads are one instruction of the full width (16 bytes for a Pack).
template <typename T, int N>
struct Raw {
  static constexpr int kBytes = N * int(sizeof(T));
  uint32_t w[kBytes < 4 ? 1 : kBytes / 4];
  __device__ __forceinline__ void load(const T* p) {
    if constexpr (kBytes == 16) {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    } else if constexpr (kBytes == 8) {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      w[0] = u.x, w[1] = u.y;
    } else if constexpr (kBytes == 4) {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    } else {
      w[0] = *reinterpret_cast<const unsigned short*>(p);
    }
  }
  __device__ __forceinline__ void store(T* p) const {  // the bytes back as they were loaded, one access
    if constexpr (kBytes == 16) {
      *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    } else if constexpr (kBytes == 8) {
      *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
    } else if constexpr (kBytes == 4) {
      *reinterpret_cast<uint32_t*>(p) = w[0];
    } else {
      *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(w[0]);
    }
  }
  __device__ __forceinline__ Acc<T> operator[](int k) const {  // value k, converted to Acc<T>
    if constexpr (std::is_same_v<T, float>) {
      return __uint_as_float(w[k]);
    } else if constexpr (std::is_same_v<T, double>) {
      return __hiloint2double(int(w[2 * k + 1]), int(w[2 * k]));
    } else {
      const uint32_t bits = k % 2 ? w[k / 2] >> 16 : w[k / 2] & 0xffffu;
      if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(bits << 16);
      return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
    }
  }
};

// kVec Acc<T> values rounded to T and packed for one store; bf16 and half round two at a time
// (one cvt.rn.bf16x2.f32 instead of two conversions and a permute).
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> to_pack(const Acc<T> (&v)[kVec]) {
  Pack<T, kVec> out;
  if constexpr (kVec % 2 == 0 && std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int k = 0; k < kVec; k += 2)
      reinterpret_cast<__nv_bfloat162*>(out.v)[k / 2] = __floats2bfloat162_rn(v[k], v[k + 1]);
  } else if constexpr (kVec % 2 == 0 && std::is_same_v<T, __half>) {
#pragma unroll
    for (int k = 0; k < kVec; k += 2)
      reinterpret_cast<__half2*>(out.v)[k / 2] = __floats2half2_rn(v[k], v[k + 1]);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = from_acc<T>(v[k]);
  }
  return out;
}

// Every lane gets the sum over the warp (the same butterfly as the exercise; versions other than v2 use
// this copy, so an unfinished exercise breaks only forward v2).
template <typename acc_t>
__device__ __forceinline__ acc_t lane_sum(acc_t v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Sums K values over one row group: the blockDim.x threads with the same threadIdx.y. Every thread of
// the group gets the totals. Shuffles within each warp, then one value per warp through `buf`
// (32 * K values); every warp adds those up in the same order, so all get the same bits, on every run.
// Alternate two buffers between calls: then one __syncthreads per call is enough.
template <int K, typename acc_t>
__device__ __forceinline__ void group_sum(acc_t (&v)[K], acc_t* buf) {
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = lane_sum(v[k]);
  const int warps = blockDim.x / 32;
  if (warps == 1) return;
  acc_t* mine = buf + threadIdx.y * warps * K;
  const int lane = threadIdx.x % 32;
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) mine[threadIdx.x / 32 * K + k] = v[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = lane_sum(lane < warps ? mine[lane * K + k] : acc_t(0));
}

// A Pack's bytes as a Raw (both are kVec values of T; the words are moved in registers).
template <typename T, int kVec>
__device__ __forceinline__ Raw<T, kVec> as_raw(const Pack<T, kVec>& p) {
  Raw<T, kVec> r;
  if constexpr (Raw<T, kVec>::kBytes >= 4) {
#pragma unroll
    for (int i = 0; i < Raw<T, kVec>::kBytes / 4; ++i) r.w[i] = reinterpret_cast<const uint32_t*>(p.v)[i];
  } else {
    r.w[0] = *reinterpret_cast<const unsigned short*>(p.v);
  }
  return r;
}

// The pack at offset `off` of the norm's input: x, or (kAdd) h = x + residual, rounded to T as an eager
// `x + residual` rounds it, written to h, and normalized as rounded.
template <typename T, int kVec, bool kAdd>
__device__ __forceinline__ void load_input(Raw<T, kVec>& v, const T* __restrict__ x,
                                           const T* __restrict__ res, T* __restrict__ h, int64_t off) {
  v.load(x + off);
  if constexpr (kAdd) {
    Raw<T, kVec> r;
    r.load(res + off);
    Acc<T> s[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) s[k] = v[k] + r[k];
    const Pack<T, kVec> p = to_pack<T>(s);
    *reinterpret_cast<Pack<T, kVec>*>(h + off) = p;
    v = as_raw<T, kVec>(p);
  }
}

// Every forward kernel writes y here and nowhere else: kVec values of row `row`, from column j. Stored as
// Raw words (one 16-byte store for a full pack): assigning the Pack itself, nvcc split forward_bulk_kernel's
// 2-byte stores into 8 (3 times slower: the 78 % excess sectors Nsight Compute reported).
template <typename T, int kVec>
__device__ __forceinline__ void store_y(T* __restrict__ y, int64_t row, int N, int j,
                                        const Acc<T> (&v)[kVec]) {
  as_raw<T, kVec>(to_pack<T>(v)).store(y + row * N + j);
}

// A pack's words, hidden from the optimizer for one use: the compiler does not hoist the conversion of a
// loop-invariant pack (a weight) to floats out of the row loop, which doubles the registers it holds.
template <typename R>
__device__ __forceinline__ R opaque(R r) {
#pragma unroll
  for (auto& word : r.w) asm volatile("" : "+r"(word));
  return r;
}

}  // namespace norm_engine

namespace norm_engine {

// Which norm a kernel computes: RMSNorm (one row sum, no bias) or LayerNorm (two row sums, a bias).
enum class Norm { kRms, kLayer };

}  // namespace norm_engine
