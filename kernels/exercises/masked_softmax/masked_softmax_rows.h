// masked_softmax_rows.h: the rows of the scores and the masks' inputs, as the glue (masked_softmax.cpp) fills
// them in and the CPU loops and CUDA kernels read them. Data only: which keys a row keeps is
// masked_softmax_math.h's, which the glue does not include (an edit there recompiles the loops and kernels,
// not the glue).
//
// x is [rows, Lk] (contiguous): row r is query i = r % Lq of batch b = r / rows_per_batch.
#pragma once

#include <cstdint>

struct SoftmaxRows {
  int64_t rows = 0;            // x.numel() / Lk
  int64_t Lk = 0;              // keys: the softmax's length
  int64_t Lq = 1;              // queries: x.size(-2) (1 for a 1-d x)
  int64_t rows_per_batch = 1;  // rows / B, B = x.size(0) (rows unless a padding mask is given)
  bool causal = false;
  const bool* keep = nullptr;  // key_padding_mask [B, Lk], contiguous, or nullptr: every key kept
};
