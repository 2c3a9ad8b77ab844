// kernels/norm_engine/config.h: the engine's tuning, as data (as quack's RmsNormFwdConfig): every threshold
// and size its plans use, with the reason for its value. Plain C++, no CUDA: the kernels take the sizes as
// template constants, the plans (launch_forward.cuh, launch_backward.cuh) the thresholds. Magnitudes are
// H100 timings (do_bench, L2 flushed; "% of a copy": the kernel's bytes over a device-to-device copy's time).
#pragma once

#include <cstddef>
#include <cstdint>

namespace norm_engine {

struct ForwardConfig {
  // Rows in registers hold up to 32 values per thread (rows up to 32768 in a 1024-thread block); longer
  // rows take forward_long_kernel or forward_bulk_kernel.
  int max_values = 32;
  // Float rows load the weight (and bias) with the row where those packs take at most this many bytes per
  // thread; past it they would hold too many registers, so they load after the sums.
  int early_bytes = 64;
  // forward_bulk_kernel from this many columns, where it applies: below it the rows in registers are as fast
  // (bf16 RMSNorm 512 x 32768: 96 % of a copy by bulk copy; float LayerNorm 256 x 65536 83 % against 69 %).
  int bulk_from = 16384;
  // forward_bulk_kernel's blocks: 512 threads, at most 8 packs each (fewest that cover a slice).
  int bulk_threads = 512;
  int bulk_most_packs = 8;
  // Its ring: at most 4 stages (more gain nothing), at least 3 (two rows in flight while one is worked on).
  int bulk_stages = 4;
  // 2-byte rows too long for registers take forward_bulk_kernel from this many rows per cluster (rounds of
  // its grid); with fewer, forward_long_kernel's one block per row is as fast and starts sooner.
  int bulk_2byte_rounds = 3;
};

struct BackwardConfig {
  // backward_kernel loads the next row before this row's math, except for 4-byte types at this many values
  // per thread: two such rows need 64 registers, all a thread of a 1024-thread block has, and spill.
  int no_prefetch_from = 16;
  // backward_bulk_kernel's ring: at most 4 stages (6 measured slower for 2-byte types), at least 3 (2
  // measured slower).
  int bulk_stages = 4;
  int bulk_min_stages = 3;
  // 2-byte rows by blocks of at most 512 threads with 2 packs each: 3-8 points of a copy faster than 1024
  // threads with 1 pack (the per-row barriers weigh more where a row is fewer bytes; 2 packs at 1024
  // threads spill).
  int narrow_threads = 512;
  int narrow_packs = 2;
  // RMSNorm's 2-byte rows that one block takes, at 4 packs: rows of 16384 at one block per row 79 % of a
  // copy (bf16 1024 x 16384) against 73 % by backward_kernel. LayerNorm keeps 2 (its 4 were 3-5 % slower,
  // its partial rows twice as many).
  int rms_one_block_packs = 4;
  // Rings of at least this many stages start the next row's pass 1 before this row's exchange.
  int pipe_from = 4;
  // The ring starts with 2 rows, the rest once row 0 is in: with all four at once row 1 landed with every
  // SM's four stages, after row 0's pass had waited for it (bf16 backward 0.5-3 % faster; one: slower).
  int first_rows = 2;
  // LayerNorm's batches of at most 16 rows per cluster take clusters of 8: its two partial rows per cluster
  // cost as much as a row's work there, and 8 blocks write a quarter as many (bf16 128 x 32768 1.07x,
  // 1024 x 16384 1.03x; at 62 rows per cluster 0.98x; RMSNorm's one partial row: 0.94-0.98x, so not it).
  int layer_wide_rows = 16;
  // 2-byte rows from 16384 columns take backward_bulk_kernel before the rows in registers: 79 % of a copy
  // against 73 % (bf16 RMSNorm 1024 x 16384; LayerNorm 76 %).
  int bulk_2byte_from = 16384;
  // RMSNorm's rows of one 16-byte pack per thread take lesson 03's rounds by bulk copy
  // (backward_v2_bulk_kernel) above 1 MiB of x: bf16 73-78 -> 83 % of a copy, float 83-85 -> 89-90 %; up to
  // 1 MiB the rows in registers were 1.08-1.35x faster (the grid barrier and the rounds' set-up cost more).
  int64_t rounds_bytes = int64_t(1) << 20;
  // backward_v2_bulk_kernel's clusters of 2 blocks where a block's partial row has at least 64 KB
  // (LayerNorm's at 8192 columns): the pair adds its column sums before writing them, half the partial rows
  // (bf16 512 x 8192 25.4 -> 22.9 us); with smaller rows clusters were 1-3 % slower.
  int rounds_cluster = 2;
  size_t rounds_cluster_from = 65536;
};

inline constexpr ForwardConfig kForward{};
inline constexpr BackwardConfig kBackward{};

// The rows both bulk kernels' rings start with: kBackward.first_rows, or all the ring's stages if fewer.
inline int first_rows(int stages) {
  return kBackward.first_rows > 0 && kBackward.first_rows < stages ? kBackward.first_rows : stages;
}

}  // namespace norm_engine
