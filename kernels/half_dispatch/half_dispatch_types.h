// kernels/half_dispatch/half_dispatch_types.h: the 16-bit float types of lesson 05's third exercise
// (kernels/exercises/half_dispatch.cuh), written out so that they work in plain C++ (CPU mode: no torch, no
// CUDA) and in CUDA device code alike. Included only by the exercise's torch-free parts (its names would
// clash with torch's at::Half and at::BFloat16).
//
//   Half, BFloat16     float16 and bfloat16 as stored (16 bits: the layout of at::Half and __half,
//                      at::BFloat16 and __nv_bfloat16): float(h) and Half(f) convert (rounding to nearest
//                      even); h + h, h * h and h += h compute in float and round to the 16-bit type, as the
//                      hardware's half-precision arithmetic does
//   Stat<T>            the result's type: double for double rows, float for the others
//   HALF_HD            __host__ __device__ under nvcc, inline otherwise
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define HALF_HD __host__ __device__ __forceinline__
#else
#define HALF_HD inline
#endif

HALF_HD uint32_t bits_of(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

HALF_HD float float_of(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// IEEE binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits; largest finite value 65504.
HALF_HD float half_bits_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
#else
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return float_of(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e == 0) {                                                    // zero, subnormal: m * 2^-24
    const float v = float(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return float_of(sign | ((e + 112) << 23) | (m << 13));  // exponent bias 127 instead of 15
#endif
}

HALF_HD uint16_t float_to_half_bits(float f) {
#ifdef __CUDA_ARCH__
  const __half_raw r = __float2half_rn(f);
  return r.x;
#else
  uint32_t x = bits_of(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above round to inf
  if (x < 0x38800000u) {                        // below 2^-14: a subnormal half, m * 2^-24
    const uint32_t e = x >> 23;
    if (e < 102) return sign;  // at most 2^-25: rounds to zero
    const uint32_t mant = (x & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t q = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (q & 1))) ++q;  // to nearest, ties to even
    return uint16_t(sign | q);
  }
  const uint32_t rounded = x + 0xfffu + ((x >> 13) & 1u);  // to nearest, ties to even, on the 13 bits dropped
  return uint16_t(sign | ((rounded >> 13) - (112u << 10)));
#endif
}

// bfloat16: the top 16 bits of a float (8 exponent bits, 7 mantissa bits).
HALF_HD float bfloat16_bits_to_float(uint16_t b) { return float_of(uint32_t(b) << 16); }

HALF_HD uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // NaN stays NaN
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

struct Half {
  uint16_t bits;
  Half() = default;
  HALF_HD Half(float f) : bits(float_to_half_bits(f)) {}
  HALF_HD operator float() const { return half_bits_to_float(bits); }
};

struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  HALF_HD BFloat16(float f) : bits(float_to_bfloat16_bits(f)) {}
  HALF_HD operator float() const { return bfloat16_bits_to_float(bits); }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2,
              "16-bit storage, the layout of a tensor's elements");

// Computed in float and rounded once: the same bits as float16 (bfloat16) arithmetic, since float has at
// least twice their significant bits plus two (24 >= 2 * 11 + 2), so rounding twice gives what rounding once
// would.
HALF_HD Half operator+(Half a, Half b) { return Half(float(a) + float(b)); }
HALF_HD Half operator*(Half a, Half b) { return Half(float(a) * float(b)); }
HALF_HD Half& operator+=(Half& a, Half b) { return a = a + b; }
HALF_HD BFloat16 operator+(BFloat16 a, BFloat16 b) { return BFloat16(float(a) + float(b)); }
HALF_HD BFloat16 operator*(BFloat16 a, BFloat16 b) { return BFloat16(float(a) * float(b)); }
HALF_HD BFloat16& operator+=(BFloat16& a, BFloat16 b) { return a = a + b; }

template <typename T>
using Stat = std::conditional_t<std::is_same_v<T, double>, double, float>;
