// kernels/norm_engine/forward.cuh: the engine's forward kernels, RMSNorm and LayerNorm (Norm), with or
// without the fused add (kAdd). Which one runs for a shape: engine.cuh's table (launch_forward.cuh).
//
//   forward_kernel        rows in registers, a row group of 1 to 32 warps per row, 16-byte packs, 1 to 4 rows
//                         per group: the fastest wherever a row fits (lesson 03's forward v3)
//   forward_long_kernel   one block per row, or a cluster of 2-8 blocks per row (sm_90), the row kept in
//                         shared memory where it fits: rows too long for registers, read once where it fits
//   forward_bulk_kernel   sm_90: a persistent grid of clusters, slices by bulk copy into a ring of
//                         stages, two rows always in flight while one is reduced and written (bf16
//                         512 x 32768 79 -> 96 % of a copy)
#pragma once

#include "config.h"
#include "exchange.cuh"

namespace norm_engine {

// Rows in registers: each row group loads its row once (16-byte packs, pack c to thread c % blockDim.x);
// RMSNorm needs one group sum (of squares), LayerNorm two (the mean, then squared deviations from the
// registers). Float rows load the weight (and bias) with the row where their packs take at most
// kForward.early_bytes per thread; 2-byte rows too where the grid is one wave (kFew, which the host picks:
// forward_one_wave).
template <typename T, Norm kNorm, int kVec, int kPacks, bool kFew>
constexpr bool kEarlyParams =
    kVec > 1 && (sizeof(T) == 4 || kFew) &&
    kPacks * kVec * int(sizeof(T)) * (kNorm == Norm::kLayer ? 2 : 1) <= kForward.early_bytes;
// Float LayerNorm's weight and bias do not fit early (128 bytes a thread at 16 values); in a one-wave grid
// (kFew) all their packs are loaded right after the sums, before the first store, where the compiler would
// issue them one pack at a time beside each pack's store: one trip to memory after the sums instead of four
// (1 x 4096 4.2 -> 3.0 us, 16 x 16384 5.6 -> 4.9 us on the H100, the same bits).
template <typename T, Norm kNorm, int kVec, int kPacks>
constexpr bool kLateParams = kVec > 1 && sizeof(T) == 4 && kNorm == Norm::kLayer && kPacks * kVec == 16 &&
                             !kEarlyParams<T, kNorm, kVec, kPacks, true>;
template <typename T, Norm kNorm, bool kAdd, int kVec, int kPacks, bool kFew = false, int kRows = 1>
__global__ __launch_bounds__(1024) void forward_kernel(const T* __restrict__ x, const T* __restrict__ res,
                                                       const T* __restrict__ w, const T* __restrict__ b,
                                                       T* __restrict__ y, T* __restrict__ h,
                                                       Acc<T>* __restrict__ mean, Acc<T>* __restrict__ rstd,
                                                       int64_t M, int N, Acc<T> eps) {
  using acc_t = Acc<T>;
  __shared__ acc_t buf[2][32 * kRows];
  // kRows > 1 (short rows, launch_forward_rows): the row group takes kRows consecutive rows, all loaded
  // before the first sum, so that a thread has 64 bytes in flight rather than 16 or 32, and the weight's
  // packs, loaded once, serve every row.
  const int64_t row0 = (blockIdx.x * int64_t(blockDim.y) + threadIdx.y) * kRows;
  wait_for_previous_grid();  // (PDL) the kernel before this one is done: its outputs may be read
  Raw<T, kVec> v[kRows][kPacks];
  acc_t s[kRows] = {};
  // The weight's (and bias's) packs: for float rows where they fit in registers beside the row (kEarly),
  // loaded with the row, before the sums. Loaded after them, their latency came on top of the row's where
  // the batch is one wave (nothing else to run meanwhile). H100, float32:
  // 1 x 4096 6.3 -> 5.0 us, 512 x 8192 92 -> 101 % of a copy, 2^24 and 2^26 elements within a point or
  // better. Not 2-byte rows: small batches gained there too (64 x 4096 81 -> 92 %), but rows of 1024 to 8192
  // lost 12-19 points at 2^22 and 2048 x 8192 fell from 97 to 79 % (more registers per thread). So 2-byte
  // rows load early only where the whole grid is resident at once (kFew: forward_one_wave), and the extra
  // registers hold nothing up: bf16 1 x 4096 3.3 -> 2.4 us, 64 x 4096 3.3 -> 2.9 us, 512 x 4096 5.3 -> 5.0 us
  // (kernel time by torch.profiler, L2 flushed). Several rows
  // per group (kRows > 1) always load them early: once for all the rows.
  constexpr bool kEarly = kRows > 1 || kEarlyParams<T, kNorm, kVec, kPacks, kFew>;
  constexpr bool kLate =
      kFew && kLateParams<T, kNorm, kVec, kPacks>;  // every pack after the sums, before the stores
  constexpr bool kAll = kEarly || kLate;            // every pack of the parameters in registers at once
  Raw<T, kVec> wv[kAll ? kPacks : 1], bv[kAll && kNorm == Norm::kLayer ? kPacks : 1];
  const auto load_params = [&](int p, int j) {
    wv[kAll ? p : 0].load(w + j);
    if constexpr (kNorm == Norm::kLayer) bv[kAll ? p : 0].load(b + j);
  };
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int j = (threadIdx.x + p * blockDim.x) * kVec;
    if constexpr (kEarly)
      if (row0 < M && j < N) load_params(p, j);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int j = (threadIdx.x + p * blockDim.x) * kVec;
      if (row0 + r < M && j < N) load_input<T, kVec, kAdd>(v[r][p], x, res, h, (row0 + r) * N + j);
    }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int p = 0; p < kPacks; ++p)
      if (row0 + r < M && (threadIdx.x + p * blockDim.x) * kVec < N)
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[r] += kNorm == Norm::kRms ? v[r][p][k] * v[r][p][k] : v[r][p][k];
  group_sum(s, buf[0]);
  acc_t mu[kRows] = {}, rs[kRows];
  if constexpr (kNorm == Norm::kLayer) {
    acc_t q[kRows] = {};
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      mu[r] = s[r] / N;
#pragma unroll
      for (int p = 0; p < kPacks; ++p)
        if (row0 + r < M && (threadIdx.x + p * blockDim.x) * kVec < N)
#pragma unroll
          for (int k = 0; k < kVec; ++k) q[r] += (v[r][p][k] - mu[r]) * (v[r][p][k] - mu[r]);
    }
    group_sum(q, buf[1]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) rs[r] = rsqrt_acc(q[r] / N + eps);
  } else {
#pragma unroll
    for (int r = 0; r < kRows; ++r) rs[r] = rsqrt_acc(s[r] / N + eps);
  }
  if (row0 >= M) return;
  if constexpr (kLate)
#pragma unroll
    for (int p = 0; p < kPacks; ++p)
      if ((threadIdx.x + p * blockDim.x) * kVec < N) load_params(p, (threadIdx.x + p * blockDim.x) * kVec);
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int j = (threadIdx.x + p * blockDim.x) * kVec;
    if (j < N) {
      if constexpr (!kAll) load_params(p, j);
      const int q = kAll ? p : 0;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (row0 + r >= M) break;
        acc_t out[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          out[k] = (v[r][p][k] - mu[r]) * rs[r] * wv[q][k];
          if constexpr (kNorm == Norm::kLayer) out[k] += bv[q][k];
        }
        store_y<T, kVec>(y, row0 + r, N, j, out);
      }
    }
  }
  if (threadIdx.x == 0)
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (row0 + r < M) {
        if constexpr (kNorm == Norm::kLayer) mean[row0 + r] = mu[r];
        rstd[row0 + r] = rs[r];
      }
}

// Rows too long for registers: one block per row, or (kCluster > 1, sm_90) a thread block cluster of kCluster
// blocks per row, block r taking slice r of the row's packs, the row sums meeting through distributed shared
// memory (cluster_sum): for rows too long for one block's shared memory but not for the cluster's. The first
// pass loads four packs per thread at a time (64 bytes in flight per thread), keeps the (slice of the) row in
// shared memory (`keep`, where it fits) and sums; the others read it from there, or (too long for shared
// memory) again from global memory, mostly from L2.
template <typename T, Norm kNorm, bool kAdd, int kVec, int kCluster = 1>
__global__ __launch_bounds__(1024) void forward_long_kernel(
    const T* __restrict__ x, const T* __restrict__ res, const T* __restrict__ w, const T* __restrict__ b,
    T* __restrict__ y, T* __restrict__ h, Acc<T>* __restrict__ mean, Acc<T>* __restrict__ rstd, int N,
    Acc<T> eps, bool keep) {
  using acc_t = Acc<T>;
  constexpr int U = 4;
  extern __shared__ float4 smem_[];
  T* kept = reinterpret_cast<T*>(smem_);
  __shared__ acc_t buf[2][32];
  __shared__ acc_t slots[2][1];  // cluster_sum's
  const int64_t row = blockIdx.x / kCluster;
  const int packs = N / kVec, per = (packs + kCluster - 1) / kCluster;
  const int lo = kCluster > 1 ? int(blockIdx.x % kCluster) * per : 0;
  const int hi = kCluster > 1 ? min(packs, lo + per) : packs;  // this block's packs: [lo, hi)
  const T* again = (kAdd ? h : x) + row * N;  // where the later passes read the row when not kept
  const auto reread = [&](int c) {
    Raw<T, kVec> v;
    if (keep)
      v.load(kept + (c - lo) * kVec);
    else
      v.load(again + c * kVec);
    return v;
  };
  acc_t s[1] = {0};
  for (int c0 = lo + threadIdx.x; c0 < hi; c0 += U * blockDim.x) {
    Raw<T, kVec> v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (c0 + u * blockDim.x < hi)
        load_input<T, kVec, kAdd>(v[u], x, res, h, row * N + (c0 + u * blockDim.x) * kVec);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * blockDim.x;
      if (c < hi) {
        if (keep) v[u].store(kept + (c - lo) * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[0] += kNorm == Norm::kRms ? v[u][k] * v[u][k] : v[u][k];
      }
    }
  }
  group_sum(s, buf[0]);  // also makes the kept row (and, not kept, h) visible to the whole block
  cluster_sum<kCluster>(s, slots[0]);
  acc_t mu = 0, rs;
  if constexpr (kNorm == Norm::kLayer) {
    mu = s[0] / N;
    acc_t q[1] = {0};
    for (int c = lo + threadIdx.x; c < hi; c += blockDim.x) {
      const Raw<T, kVec> v = reread(c);
#pragma unroll
      for (int k = 0; k < kVec; ++k) q[0] += (v[k] - mu) * (v[k] - mu);
    }
    group_sum(q, buf[1]);
    cluster_sum<kCluster>(q, slots[1]);
    rs = rsqrt_acc(q[0] / N + eps);
  } else {
    rs = rsqrt_acc(s[0] / N + eps);
  }
  for (int c = lo + threadIdx.x; c < hi; c += blockDim.x) {
    const Raw<T, kVec> v = reread(c);
    Raw<T, kVec> wv, bv;
    wv.load(w + c * kVec);
    if constexpr (kNorm == Norm::kLayer) bv.load(b + c * kVec);
    acc_t out[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      out[k] = (v[k] - mu) * rs * wv[k];
      if constexpr (kNorm == Norm::kLayer) out[k] += bv[k];
    }
    store_y<T, kVec>(y, row, N, c * kVec, out);
  }
  if (threadIdx.x == 0 && lo == 0) {
    if constexpr (kNorm == Norm::kLayer) mean[row] = mu;
    rstd[row] = rs;
  }
  cluster_done<kCluster>();
}

// The forward of rows too long for registers (and of long rows in registers that barely fit), on sm_90:
// backward_bulk_kernel's design for one input. A persistent grid of thread block clusters of C = 1, 2, 4 or
// 8 blocks (C at run time), cluster i taking rows i, i + G, ... (G clusters), block r owning slice r of the
// columns (n = N / C). Each slice of x (and, kAdd, of the residual) arrives by bulk copy into a ring of
// `stages` shared-memory buffers, the next rows' while this one is worked on. Each row: pass 1 sums the
// block's slice (RMSNorm: of squares; LayerNorm: the sum, then squared deviations from the block's own mean,
// which is numerically safe) and pushes the block's numbers into every block of the cluster; gather adds the
// C blocks' numbers in rank order (LayerNorm: Chan's rule for combining the groups' means and deviations);
// pass 2 writes y from the stage. Why: forward_long_kernel holds one row per block with nothing in flight
// during its barriers and its writes (one block per SM where a row fills shared memory); here two rows are
// always on their way.
template <typename T, Norm kNorm, bool kAdd, int kVec, int kPacks, int kThreads>
__global__ __launch_bounds__(kThreads) void forward_bulk_kernel(
    const T* __restrict__ x_, const T* __restrict__ res_, const T* __restrict__ w_, const T* __restrict__ b_,
    T* __restrict__ y_, T* __restrict__ h_, Acc<T>* __restrict__ mean, Acc<T>* __restrict__ rstd, int64_t M,
    int N, Acc<T> eps, int stages, bool pipe, int first_rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using acc_t = Acc<T>;
  constexpr int K = kNorm == Norm::kLayer ? 2 : 1;  // numbers per block and row: sum (of squares), deviations
  constexpr int I = kAdd ? 2 : 1;                   // inputs per stage: x (and the residual)
  static_assert(sizeof(acc_t) == 4 && kVec % 4 == 0, "float, half and bf16, in 16-byte packs");
  extern __shared__ __align__(128) unsigned char bulk_smem_[];
  __shared__ acc_t red[2][K][32];  // group_sum's, by parity
  constexpr int X = 4;             // rows of the cluster's exchange in flight
  __shared__ acc_t slots[X][8][K];
  __shared__ alignas(8) uint64_t bars[kForward.bulk_stages];
  __shared__ alignas(8) uint64_t xbars[X];
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int C = int(cluster.num_blocks()), n = N / C, rank = int(cluster.block_rank()), col0 = rank * n;
  const int64_t G = gridDim.x / C, first = blockIdx.x / C;
  const int64_t rows = first < M ? (M - first + G - 1) / G : 0;  // this cluster's
  const T *x = x_ + col0, *res = kAdd ? res_ + col0 : nullptr, *w = w_ + col0;
  const T* b = kNorm == Norm::kLayer ? b_ + col0 : nullptr;
  T *y = y_ + col0, *h = kAdd ? h_ + col0 : nullptr;
  T* ring = reinterpret_cast<T*>(bulk_smem_);  // stage s: x's slice [n] (then the residual's [n])
  const uint32_t bytes = uint32_t(n) * sizeof(T);
  const auto fetch = [&](int64_t k, int s) {  // thread 0: row first + k G into stage s
    const int64_t row = first + k * G;
    bulk::arrive_expect(&bars[s], I * bytes);
    bulk::copy(ring + int64_t(s) * I * n, x + row * N, bytes, &bars[s]);
    if constexpr (kAdd) bulk::copy(ring + int64_t(s) * I * n + n, res + row * N, bytes, &bars[s]);
  };
  start_ring(bars, stages, xbars, X, C, rows, first_rows, fetch);
  const int packs = n / kVec;
  // this thread's packs: c = threadIdx.x + p kThreads, p < kPacks; their weights (and biases) in registers
  // for every row (loaded per row from L2, they stalled pass 2 on every pack: half the forward's time)
  const auto each_pack = [&](auto&& f) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int c = threadIdx.x + p * kThreads;
      if (c < packs) f(p, c);
    }
  };
  Raw<T, kVec> wv[kPacks], bv[kPacks];
  each_pack([&](int p, int c) {
    wv[p].load(w + c * kVec);
    if constexpr (kNorm == Norm::kLayer) bv[p].load(b + c * kVec);
  });
  // pack c of the norm's input in stage s: x, or h = x + residual rounded to T (as written to h)
  const auto input = [&](int s, int c) {
    Raw<T, kVec> v;
    v.load(ring + int64_t(s) * I * n + c * kVec);
    if constexpr (kAdd) {
      Raw<T, kVec> r;
      r.load(ring + int64_t(s) * I * n + n + c * kVec);
      acc_t sum[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum[j] = v[j] + r[j];
      v = as_raw<T, kVec>(to_pack<T>(sum));
    }
    return v;
  };
  // Pass 1 of row k: the wait for its stage, the block's numbers, and (cluster) their delivery to every
  // block (deliver_sums).
  RingCursor next;  // the stage (and phase) of the next row pass 1 takes
  const auto pass1 = [&](int64_t k, acc_t(&sums)[K]) {
    const int s = next.stage;
    bulk::wait(&bars[s], next.phase);
    next.advance(stages);
    if (k == 0) fill_ring(stages, rows, first_rows, fetch);
    acc_t s0[1] = {0};
    each_pack([&](int, int c) {
      const Raw<T, kVec> v = input(s, c);
      if constexpr (kAdd) v.store(h + (first + k * G) * N + c * kVec);
#pragma unroll
      for (int j = 0; j < kVec; ++j) s0[0] += kNorm == Norm::kRms ? v[j] * v[j] : v[j];
    });
    group_sum(s0, red[k & 1][0]);
    sums[0] = s0[0];
    if constexpr (K == 2) {
      const acc_t mb = s0[0] / n;  // the block's mean
      acc_t q[1] = {0};
      each_pack([&](int, int c) {
        const Raw<T, kVec> v = input(s, c);
#pragma unroll
        for (int j = 0; j < kVec; ++j) q[0] += (v[j] - mb) * (v[j] - mb);
      });
      group_sum(q, red[k & 1][1]);
      sums[1] = q[0];
    }
    if (C > 1 && threadIdx.x < C) deliver_sums<K, X>(slots, xbars, k, C, rank, sums);
  };
  // Row k's mean and rstd from the C blocks' numbers, added in rank order (the same bits in every block).
  const auto gather = [&](int64_t k, const acc_t(&sums)[K], acc_t& mu, acc_t& rs) {
    acc_t total = sums[0], dev = K == 2 ? sums[K - 1] : acc_t(0);
    if (C > 1) {
      const int xs = int(k % X);
      bulk::wait_cluster(&xbars[xs], uint32_t(k / X) & 1);
      total = 0;
      for (int r = 0; r < C; ++r) total += slots[xs][r][0];
      if constexpr (K == 2) {  // Chan et al.: sum of the deviations about each slice's mean, plus n (mean_r -
                               // mu)^2
        dev = 0;
        for (int r = 0; r < C; ++r) {
          const acc_t d = slots[xs][r][0] / n - total / N;
          dev += slots[xs][r][1] + n * d * d;
        }
      }
    }
    if constexpr (kNorm == Norm::kLayer) {
      mu = total / N;
      rs = rsqrt_acc(dev / N + eps);
    } else {
      mu = 0;
      rs = rsqrt_acc(total / N + eps);
    }
  };
  // Pass 2 of row k: y from its stage.
  const auto pass2 = [&](int64_t k, int s, acc_t mu, acc_t rs) {
    const int64_t row = first + k * G;
    each_pack([&](int p, int c) {
      const Raw<T, kVec> v = input(s, c);
      // LayerNorm's 2-byte weights and biases at 8 packs: converted here, row by row (opaque), not hoisted
      // out of the row loop as floats, which took twice the registers and spilled (not at 4 packs, where
      // opaque cost 1-3 points of a copy)
      constexpr bool kOpaque = kNorm == Norm::kLayer && sizeof(T) == 2 && kPacks == 8;
      const Raw<T, kVec> wp = kOpaque ? opaque(wv[p]) : wv[p];
      Raw<T, kVec> bp;  // (RMSNorm: none)
      if constexpr (kNorm == Norm::kLayer) bp = kOpaque ? opaque(bv[p]) : bv[p];
      acc_t out[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        out[j] = (v[j] - mu) * rs * wp[j];
        if constexpr (kNorm == Norm::kLayer) out[j] += bp[j];
      }
      store_y<T, kVec>(y, row, N, c * kVec, out);
    });
    if (threadIdx.x == 0 && rank == 0) {
      if constexpr (kNorm == Norm::kLayer) mean[row] = mu;
      rstd[row] = rs;
    }
  };
  // Row by row, as backward_bulk_kernel: `pipe`, row k + 1's pass 1 before row k's gather; each row's stage
  // refilled after the first block barrier that follows its pass 2.
  acc_t sums[K], sums1[K] = {}, mu, rs;
  if (pipe && rows > 0) pass1(0, sums);
  for (int64_t k = 0, s = 0; k < rows; ++k, s = s + 1 == stages ? 0 : s + 1) {  // s: row k's stage
    if (!pipe) pass1(k, sums);
    if (pipe && k + 1 < rows) pass1(k + 1, sums1);
    if (threadIdx.x == 0 && k >= 1 && k - 1 + stages < rows)
      fetch(k - 1 + stages, int(s == 0 ? stages : s) - 1);
    gather(k, sums, mu, rs);
    pass2(k, int(s), mu, rs);
    if (pipe)
#pragma unroll
      for (int q = 0; q < K; ++q) sums[q] = sums1[q];
  }
  // (no cluster barrier at the end: every delivery into this block has landed before its last gather
  // returned, and no block sends any after its last row; the barrier's fence waited for the row's stores)
#else
  __trap();  // never launched: plan_forward_bulk checks that this kernel was built for sm_90 or newer
#endif
}

}  // namespace norm_engine
