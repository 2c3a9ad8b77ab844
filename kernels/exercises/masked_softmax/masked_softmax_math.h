// masked_softmax_math.h: which keys a row of scores keeps, for the CPU loops (masked_softmax.cpu.cpp) and the
// CUDA kernels (masked_softmax.cu) alike. Torch-free, host and device.
//
// Row r of the scores (SoftmaxRows, masked_softmax_rows.h) is query i = r % Lq of batch b = r /
// rows_per_batch. Key j of row r is kept when both masks keep it:
//   causal        j <= i, as scaled_dot_product_attention's is_causal: its mask is ones(Lq, Lk).tril(0),
//                 aligned to the top left when Lq != Lk (query 0 sees key 0 only, whatever Lk is). Every key
//                 from key_limit(s, r) on is masked: the row is a prefix [0, limit) and a masked tail, and a
//                 kernel never reads x in the tail (those scores cannot change y).
//   padding       keep_row(s, r)[j], the row of key_padding_mask [B, Lk] (True = keep) of r's batch: the same
//                 row for every head and query of that batch.
// Neither mask is ever materialized as a [rows, Lk] tensor: the causal one is an index comparison, the
// padding one a load of B * Lk bools that every head and query of the batch shares (it stays in the caches).
#pragma once

#include <cstdint>

#include "masked_softmax_rows.h"

#ifdef __CUDACC__
#define MASKED_SOFTMAX_HD __host__ __device__ __forceinline__
#else
#define MASKED_SOFTMAX_HD inline
#endif

// The causal limit of row r: its keys j >= limit are masked. s.Lk when causal is off.
MASKED_SOFTMAX_HD int64_t key_limit(const SoftmaxRows& s, int64_t r) {
  int64_t limit = s.Lk;
  // TODO(exercise): your code here (the solution is 4 lines).
  return limit;
}

// The padding mask's row for row r (Lk bools), or nullptr when there is no padding mask.
MASKED_SOFTMAX_HD const bool* keep_row(const SoftmaxRows& s, int64_t r) {
  const bool* row = nullptr;
  // TODO(exercise): your code here (the solution is 1 lines).
  return row;
}
