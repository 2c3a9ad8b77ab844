// kernels/common/philox.cuh: Philox4x32-10, a counter-based random number generator, on the host and the
// device (lesson 05: dropout whose mask is recomputed in backward instead of stored). No torch headers: any
// .cu or .cpp can include it, and the CPU and the GPU compute the same bits.
//
// A counter-based generator is a pure function: 4 random 32-bit words = philox4x32_10(counter, key). There
// is no state to carry from one draw to the next, so element i of a tensor can get its random number from
// its own index, in any thread, in any order, on any device, forward or backward. This is the generator
// PyTorch's CUDA ops use (through curand) and PyTorch's CUDA generator hands out (seed, offset) for it.
//
//   philox4x32_10(ctr, key) -> Words4        the raw function (Salmon et al., SC'11; Random123's
//                                             known-answer vectors hold: tests/ops/test_dropout.py)
//   draw4(seed, offset, group) -> Words4     the 4 words of element group `group` (elements 4g .. 4g+3):
//                                             counter {offset / 4 (64 bits), group (64 bits)}, key seed.
//                                             The same words as curand_init(seed, group, offset) + curand4()
//   drop_threshold(p) -> uint64_t            round(p * 2^32) for 0 <= p <= 1 (computed once, on the host)
//   keeps(word, threshold) -> bool           keep the element whose word this is: word >= threshold, so
//                                             p = 0 keeps every element and p = 1 drops every one, exactly
//   keep_bits4(seed, offset, group, threshold) -> uint32_t
//                                             bit k set: element 4 * group + k is kept (one Philox call)
//   keep(seed, offset, i, threshold) -> bool element i alone (a whole Philox call for one bit: use
//                                             keep_bits4 when a thread owns 4 neighbours)
//   RngState, unpack(state, seed, offset)    PyTorch's at::PhiloxCudaState, field for field, without torch:
//                                             the seed and offset a kernel reads (through pointers in a
//                                             captured CUDA graph, where every replay brings new ones)
//   kOffsetPerCall                           what one dropout call takes from the generator: 4 (each
//                                             element group draws one 4-word block of its own subsequence)
//
// Offsets count 32-bit words, as PyTorch's generator does (philox_cuda_state(increment) advances it by
// `increment`, a multiple of 4), and a call at offset o uses block o / 4 of every group's subsequence; a
// later call (offset o + 4) uses the next block. So a kernel that draws the mask of a tensor with
// keep_bits4(seed, offset, i / 4, t) asks its generator for kOffsetPerCall, whatever the tensor's size.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PHILOX_HD __host__ __device__ __forceinline__
#else
#define PHILOX_HD inline
#endif

namespace philox {

struct Words4 {
  uint32_t v[4];
};

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // the round multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // the key schedule (golden ratio, sqrt(3) - 1)
constexpr uint64_t kOffsetPerCall = 4;

// Ten rounds of: two 32x32 -> 64-bit products, their halves swapped and xored with the other two words
// and the key; the key moves on by a fixed step between rounds.
PHILOX_HD Words4 philox4x32_10(Words4 c, uint32_t k0, uint32_t k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.v[0], p1 = static_cast<uint64_t>(kM1) * c.v[2];
    c = Words4{{static_cast<uint32_t>(p1 >> 32) ^ c.v[1] ^ k0, static_cast<uint32_t>(p1),
                static_cast<uint32_t>(p0 >> 32) ^ c.v[3] ^ k1, static_cast<uint32_t>(p0)}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

PHILOX_HD Words4 draw4(uint64_t seed, uint64_t offset, uint64_t group) {
  const uint64_t block = offset / 4;
  const Words4 ctr{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                    static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A word is uniform on [0, 2^32): it is below round(p * 2^32) with probability p (to within 2^-33).
// 64 bits, so that p = 1 (2^32) is above every word.
PHILOX_HD uint64_t drop_threshold(double p) {
  if (!(p > 0)) return 0;
  if (p >= 1) return uint64_t(1) << 32;
  return static_cast<uint64_t>(p * 4294967296.0 + 0.5);
}

PHILOX_HD bool keeps(uint32_t word, uint64_t threshold) { return word >= threshold; }

PHILOX_HD uint32_t keep_bits4(uint64_t seed, uint64_t offset, uint64_t group, uint64_t threshold) {
  const Words4 r = draw4(seed, offset, group);
  return uint32_t(keeps(r.v[0], threshold)) | uint32_t(keeps(r.v[1], threshold)) << 1 |
         uint32_t(keeps(r.v[2], threshold)) << 2 | uint32_t(keeps(r.v[3], threshold)) << 3;
}

PHILOX_HD bool keep(uint64_t seed, uint64_t offset, uint64_t i, uint64_t threshold) {
  return (keep_bits4(seed, offset, i / 4, threshold) >> (i % 4)) & 1u;
}

// at::PhiloxCudaState without torch (the .cpp copies one into the other): outside a CUDA graph capture the
// seed and offset are values; inside one they are read from PyTorch's device tensors (seed_ptr, and
// offset_ptr plus offset_intragraph), which the graph updates before every replay.
struct RngState {
  uint64_t seed = 0, offset = 0;
  const int64_t* seed_ptr = nullptr;
  const int64_t* offset_ptr = nullptr;
  uint64_t offset_intragraph = 0;
  bool captured = false;
};

// What at::cuda::philox::unpack does; on the device the pointers are device memory, on the host host memory.
PHILOX_HD void unpack(const RngState& s, uint64_t& seed, uint64_t& offset) {
  if (s.captured) {
    seed = static_cast<uint64_t>(*s.seed_ptr);
    offset = static_cast<uint64_t>(*s.offset_ptr) + s.offset_intragraph;
  } else {
    seed = s.seed;
    offset = s.offset;
  }
}

}  // namespace philox
