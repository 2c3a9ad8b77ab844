// kernels/common/blocked_sum.h: the row sum of the norms' CPU implementations
// (kernels/layernorm/layernorm.cpu.cpp, lesson 03; kernels/common/rmsnorm_cpu.h, lesson 05). No torch
// headers.
//
//   blocked_sum<acc_t>(n, value)   value(0) + ... + value(n - 1), in blocks of 512 with 8 accumulators
#pragma once

#include <algorithm>
#include <cstdint>

// 8 independent accumulators (the compiler keeps them in one SIMD register) over blocks of 512 values, then
// the blocks added: faster than one running sum, and the rounding error grows like 64 + n/512 rather than n,
// which matters for rows of 65536 floats or with a large mean.
template <typename acc_t, typename F>
inline acc_t blocked_sum(int64_t n, F&& value) {
  acc_t total = 0;
  for (int64_t j0 = 0; j0 < n; j0 += 512) {
    const int64_t end = std::min(n, j0 + 512);
    acc_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = j0;
    for (; j + 8 <= end; j += 8)
      for (int k = 0; k < 8; ++k) lanes[k] += value(j + k);
    for (; j < end; ++j) lanes[0] += value(j);
    for (int k = 0; k < 8; ++k) total += lanes[k];
  }
  return total;
}
