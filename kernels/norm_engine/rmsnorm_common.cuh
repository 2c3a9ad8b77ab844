// kernels/norm_engine/rmsnorm_common.cuh: the fast norm kernels of lesson 05, written once for RMSNorm and
// LayerNorm and for a plain input or a fused residual add (h = x + residual, then the norm of h).
// kernels/rmsnorm/rmsnorm.cu instantiates them for RMSNorm (its v2), kernels/add_norm/add_norm.cu for the
// fused add + RMSNorm and add + LayerNorm. No torch header: only those two .cu files include it. Built from
// lesson 03's pieces (layernorm_common.cuh: Raw, to_pack, group_sum, row_threads, vectorizable,
// blocks_per_sm).
//
//   Norm                      kRms: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) (one row sum);
//                             kLayer: y = (x - mean) * rstd * w + b (two row sums, from registers)
//   load_input, store_y       a pack of the input (x, or x + residual rounded to T and written to h), and
//                             the one place a kernel writes y (where an epilogue, e.g. dropout, goes)
//   forward_kernel            rows in registers: a row group of 1 to 32 warps per row, 16-byte packs; short
//                             rows in many waves 2 or 4 rows per row group (forward_short_rows)
//   forward_long_kernel       one block per row, or a cluster of 2-8 blocks per row (sm_90); the row kept in
//                             shared memory where it fits, else read again (from L2)
//   forward_bulk_kernel       long rows on sm_90: backward_bulk_kernel's design for the forward (a persistent
//                             grid of clusters of 1-8 blocks per row, slices by bulk copy into a ring of
//                             stages, the row's numbers pushed between the blocks), so rows are always in
//                             flight while one is reduced and written
//   backward_kernel           a persistent grid of row groups, rows in registers with the next one in flight,
//                             grad_weight (and grad_bias) summed per block in shared memory, one row of
//                             partial sums per block
//   cluster_sum, cluster_done backward rows over a thread block cluster (sm_90): each block holds a slice
//                             of the row in registers; the row sums meet through distributed shared memory
//   backward_bulk_kernel      rows too long for registers, sm_90: a persistent grid of clusters of 1-8 blocks
//                             per row, the row's slices of x and grad_y arriving by bulk copy (bulk_copy.cuh)
//                             into a ring of shared-memory stages, two rows in flight while one is worked on
//   start_ring, deliver_sums  the bulk kernels' start, and their exchange of a row's sums within the cluster
//                             (st.async, no fence: release arrivals waited for each row's stores)
//   opaque                    a pack's words hidden from the optimizer for one use: LayerNorm's 2-byte
//                             weights at 8 packs, converted to float row by row instead of held as floats
//   backward_long_rows_kernel, backward_long_cols_kernel: rows too long for registers elsewhere (and for
//                             backward_bulk_kernel): the two row sums by one block per row, then grad_x and
//                             the partial column sums by column tiles (x and grad_y read twice)
//   sum_partials_kernel       adds the partial rows in a fixed order (the same bits on every run), launched
//                             with PDL after the kernel that writes them
//   kPdlMain                  forward_kernel and the two bulk kernels launch with PDL and wait for the kernel
//                             before them first: in a stream their launch overlaps that kernel's end
//   launch_forward (plan_forward_bulk), plan_backward (plan_rounds: lesson 03's bulk-copy kernel,
//                             layernorm_bulk.cuh; plan_rows, plan_bulk), launch_backward: the host side
//
// Backward, with xhat = (x - mean) * rstd (mean = 0 for RMSNorm) and g = grad_y * w, per row:
//   grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)) [+ grad_h]    (RMSNorm: no mean(g) term)
//   grad_w = sum over rows of grad_y * xhat,  grad_b = sum over rows of grad_y.
#pragma once

#include <cooperative_groups.h>

#include <type_traits>

#include "bulk_copy.cuh"
#include "layernorm/layernorm_bulk.cuh"  // lesson 03's backward_v2_bulk_kernel, which RMSNorm's short rows take (kind 4)
#include "layernorm/layernorm_common.cuh"

namespace rmsnorm {

using layernorm::active_clusters;
using layernorm::blocks_per_sm;
using layernorm::group_sum;
using layernorm::lane_sum;
using layernorm::Raw;
using layernorm::row_threads;
using layernorm::rsqrt_acc;
using layernorm::to_pack;
using layernorm::vectorizable;

enum class Norm { kRms, kLayer };

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

// Row sums across the kCluster blocks of a thread block cluster (sm_90) that share a row, each block holding
// a slice of it: every block puts its group's totals (group_sum's, K values per row group) into `slot` in its
// own shared memory, the cluster synchronizes, and every block adds the kCluster blocks' values read through
// distributed shared memory in rank order, so all get the same bits. A slot may be written again once every
// block has passed the next cluster barrier (it has read this one by then). kCluster == 1: nothing to do.
template <int kCluster, int K, typename acc_t>
__device__ __forceinline__ void cluster_sum(acc_t (&v)[K], acc_t* slot) {
  if constexpr (kCluster > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    if (threadIdx.x == 0)
#pragma unroll
      for (int k = 0; k < K; ++k) slot[threadIdx.y * K + k] = v[k];
    cluster.sync();
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = 0;
    for (int r = 0; r < kCluster; ++r) {
      const acc_t* remote = cluster.map_shared_rank(slot, r);
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] += remote[threadIdx.y * K + k];
    }
#else
    __trap();  // launched only on sm_90 and newer
#endif
  }
}

// The end of a cluster kernel: no block leaves (freeing its shared memory) while another may still read it.
template <int kCluster>
__device__ __forceinline__ void cluster_done() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCluster > 1) cooperative_groups::this_cluster().sync();
#endif
}

// Every forward kernel writes y here and nowhere else: kVec values of row `row`, from column j. Stored as
// Raw words (one 16-byte store for a full pack): assigning the Pack itself, nvcc split forward_bulk_kernel's
// 2-byte stores into 8 (3 times slower: the 78 % excess sectors Nsight Compute reported).
template <typename T, int kVec>
__device__ __forceinline__ void store_y(T* __restrict__ y, int64_t row, int N, int j,
                                        const Acc<T> (&v)[kVec]) {
  as_raw<T, kVec>(to_pack<T>(v)).store(y + row * N + j);
}

// ------------------------------------------------------------------------------------------------
// Forward
// ------------------------------------------------------------------------------------------------

// Rows in registers: each row group loads its row once (16-byte packs, pack c to thread c % blockDim.x);
// RMSNorm needs one group sum (of squares), LayerNorm two (the mean, then squared deviations from the
// registers). Float rows load the weight (and bias) with the row where their packs take at most
// RMSNORM_FWD_EARLY_BYTES per thread (0: always after the sums, as before 2026-11-27); 2-byte rows too where
// the grid is one wave (kFew, which the host picks: forward_one_wave).
#ifndef RMSNORM_FWD_EARLY_BYTES
#define RMSNORM_FWD_EARLY_BYTES 64
#endif
template <typename T, Norm kNorm, int kVec, int kPacks, bool kFew>
constexpr bool kEarlyParams =
    kVec > 1 && (sizeof(T) == 4 || kFew) &&
    kPacks * kVec * int(sizeof(T)) * (kNorm == Norm::kLayer ? 2 : 1) <= RMSNORM_FWD_EARLY_BYTES;
// Float LayerNorm's weight and bias do not fit early (128 bytes a thread at 16 values); in a one-wave grid
// (kFew) all their packs are loaded right after the sums, before the first store. Before, the compiler issued
// them one pack at a time beside each pack's store: four trips to memory after the sums where one does. H100
// kernel time (torch.profiler, L2 flushed; results/h100/layernorm_forward_routing_2026-11-27.md): 1 x 4096
// 4.21 -> 2.96 us, 64 x 4096 4.64 -> 3.37, 1 x 1024 4.22 -> 2.88, 16 x 16384 5.59 -> 4.85 (Liger's Triton
// kernel 2.36, 3.01, 1.93, 4.45), the same bits. RMSNORM_FWD_FLOAT_FEW 0: as before (for the A/B).
#ifndef RMSNORM_FWD_FLOAT_FEW
#define RMSNORM_FWD_FLOAT_FEW 1
#endif
template <typename T, Norm kNorm, int kVec, int kPacks>
constexpr bool kLateParams = RMSNORM_FWD_FLOAT_FEW && kVec > 1 && sizeof(T) == 4 && kNorm == Norm::kLayer
                             && kPacks * kVec == 16 && !kEarlyParams<T, kNorm, kVec, kPacks, true>;
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
  // the batch is one wave (nothing else to run meanwhile). H100, float32 (results/h100/, 2026-11-27):
  // 1 x 4096 6.3 -> 5.0 us, 512 x 8192 92 -> 101 % of a copy, 2^24 and 2^26 elements within a point or
  // better. Not 2-byte rows: small batches gained there too (64 x 4096 81 -> 92 %), but rows of 1024 to 8192
  // lost 12-19 points at 2^22 and 2048 x 8192 fell from 97 to 79 % (more registers per thread). So 2-byte
  // rows load early only where the whole grid is resident at once (kFew: forward_one_wave), and the extra
  // registers hold nothing up: bf16 1 x 4096 3.3 -> 2.4 us, 64 x 4096 3.3 -> 2.9 us, 512 x 4096 5.3 -> 5.0 us
  // (kernel time by torch.profiler, L2 flushed; results/h100/norm_small_forward_2026-11-27.md). Several rows
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

// The start of the bulk-copy kernels (forward_bulk_kernel, backward_bulk_kernel), sm_90: thread 0
// initializes an mbarrier per stage of the ring (one arrival, plus the bytes its copies announce) and per
// exchange slot (deliver_sums); the cluster (or block) synchronizes, so that no block arrives on a barrier
// not yet initialized; then thread 0 starts the first `first` rows' copies, fetch(row k, stage k), and
// fill_ring the others once row 0 has landed (RMSNORM_BULK_FIRST_ROWS says why). (Started before
// the barrier, on the block's own barriers, they made the backward 1-3 us slower: the other threads' loads
// of the weights, which the first row waits for, then queue behind them.)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// A row's stage in the ring and the phase parity its mbarrier completes with, counted row by row: k % stages
// and k / stages (stages known at run time) cost a 32-bit division per pass per row, whose chain of
// dependent instructions held every warp at once: 9 % of the backward's stall samples (Nsight Compute).
struct RingCursor {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++stage == stages) stage = 0, phase ^= 1;
  }
};

template <typename Fetch>
__device__ __forceinline__ void start_ring(uint64_t* bars, int stages, uint64_t* xbars, int slots, int C,
                                           int64_t rows, int first, const Fetch& fetch) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) bulk::init(&bars[s], 1);
    for (int s = 0; s < slots; ++s) bulk::init(&xbars[s], 1);  // (the block's own arrival, plus C deliveries)
    bulk::fence_init();
  }
  if (C > 1)
    cooperative_groups::this_cluster().sync();
  else
    __syncthreads();
  wait_for_previous_grid();  // (PDL) the kernel before this one is done: its outputs may be read
  if (threadIdx.x == 0)
    for (int s = 0; s < first && s < stages && s < rows; ++s) fetch(s, s);
}

// The rest of the ring's first rows (stages first, first + 1, ...), which thread 0 starts once row 0 is in.
template <typename Fetch>
__device__ __forceinline__ void fill_ring(int stages, int64_t rows, int first, const Fetch& fetch) {
  if (threadIdx.x == 0)
    for (int s = first; s < stages && s < rows; ++s) fetch(s, s);
}

// The bulk kernels' exchange of row k's K numbers (threads 0..C-1 of each block): thread r stores them into
// block r's slot k % X by st.async, each float counted on that slot's mbarrier as it lands; thread 0 also
// makes the block's own arrival there, announcing the C K floats the phase waits for. The slot's next phase
// is row k + X: no block starts that row's exchange before it has gathered row k + X - 2 (which needs
// every block's row k + X - 2 delivery, made after its row k one), so row k's phase is long complete.
template <int K, int X>
__device__ __forceinline__ void deliver_sums(float (&slots)[X][8][K], uint64_t (&xbars)[X], int64_t k, int C,
                                             int rank, const float (&sums)[K]) {
  const int x = int(k % X);
  if (threadIdx.x == 0) bulk::arrive_expect(&xbars[x], uint32_t(C * K * sizeof(float)));
#pragma unroll
  for (int q = 0; q < K; ++q) bulk::store_async_remote(&slots[x][rank][q], threadIdx.x, sums[q], &xbars[x]);
}
#endif

// Build-time settings of forward_bulk_kernel, for tuning (benchmarks/rmsnorm.py --settings).
#ifndef RMSNORM_FWD_BULK_FROM
#define RMSNORM_FWD_BULK_FROM 16384  // rows of at least this many columns take it, where it applies (0: none)
#endif
#ifndef RMSNORM_FWD_BULK_THREADS
#define RMSNORM_FWD_BULK_THREADS 512  // threads per block
#endif
#ifndef RMSNORM_FWD_BULK_MIN_CLUSTER
#define RMSNORM_FWD_BULK_MIN_CLUSTER 1  // the fewest blocks per row (1, 2, 4, 8)
#endif
#ifndef RMSNORM_FWD_BULK_STAGES
#define RMSNORM_FWD_BULK_STAGES 4  // the most stages of the ring
#endif

// A pack's words, hidden from the optimizer for one use: the compiler does not hoist the conversion of a
// loop-invariant pack (a weight) to floats out of the row loop, which doubles the registers it holds.
template <typename R>
__device__ __forceinline__ R opaque(R r) {
#pragma unroll
  for (auto& word : r.w) asm volatile("" : "+r"(word));
  return r;
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
  __shared__ alignas(8) uint64_t bars[RMSNORM_FWD_BULK_STAGES];
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
      // out of the row loop as floats, which took twice the registers and spilled (elsewhere the same SASS as
      // before: opaque cost 1-3 points at 4 packs, H100 2026-11-27)
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
#ifdef RMSNORM_BULK_END_SYNC
  if (C > 1) cluster.sync();
#endif
  // (no cluster barrier at the end: every delivery into this block has landed before its last gather
  // returned, and no block sends any after its last row; the barrier's fence waited for the row's stores)
#else
  __trap();  // never launched: plan_forward_bulk checks that this kernel was built for sm_90 or newer
#endif
}

// ------------------------------------------------------------------------------------------------
// Backward
// ------------------------------------------------------------------------------------------------

template <typename T, int kVec, int kPacks>
struct Row {  // this thread's share of one row of x (or h) and grad_y, and the row's mean and rstd
  Raw<T, kVec> x[kPacks], g[kPacks];
  Acc<T> mean = 0, rstd = 0;
};

// Whether backward_kernel loads the next row before this row's math: two rows of x and grad_y in registers.
// Not for 4-byte types at 16 values per thread: two such rows need 64 registers, all a thread of a
// 1024-thread block has, and spill (the values-per-thread threshold can be set at build time for tuning).
#ifndef RMSNORM_BWD_NO_PREFETCH_FROM
#define RMSNORM_BWD_NO_PREFETCH_FROM 16
#endif
template <typename T, int kValues>
constexpr bool kPrefetch = !(sizeof(T) >= 4 && kValues >= RMSNORM_BWD_NO_PREFETCH_FROM);

// The per-row sums that grad_x needs, over the row group, for kSums = 1 (RMSNorm: sum of g * xhat) or
// 2 (LayerNorm: and sum of g).
template <Norm kNorm>
constexpr int kSums = kNorm == Norm::kLayer ? 2 : 1;

// Persistent row groups (block b, group r: rows b * R + r, then + gridDim.x * R, ...): the next row's loads
// are issued before this row's math. Shared memory: reduction buffers, then per group the column sums of
// grad_w (and grad_b) for the columns its threads own, so no atomics; at the end each block adds its groups
// in order into its row of `partials` ([kSums][gridDim.x][N]). kCluster > 1 (sm_90): a cluster of kCluster
// blocks takes the rows one block would, block r holding slice r of the columns; the row sums meet through
// distributed shared memory (cluster_sum), and the cluster writes one row of partial sums.
template <typename T, Norm kNorm, int kVec, int kPacks, int kCluster = 1>
__global__ __launch_bounds__(1024) void backward_kernel(const T* __restrict__ dy_, const T* __restrict__ dh_,
                                                        const T* __restrict__ x_,
                                                        const Acc<T>* __restrict__ mean,
                                                        const Acc<T>* __restrict__ rstd,
                                                        const T* __restrict__ w_, T* __restrict__ dx_,
                                                        Acc<T>* __restrict__ partials, int64_t M, int N) {
  using acc_t = Acc<T>;
  constexpr int K = kSums<kNorm>;
  constexpr int C = kVec * sizeof(acc_t) >= 16 ? 16 / int(sizeof(acc_t)) : kVec;  // acc values per access
  using A = Pack<acc_t, C>;
  extern __shared__ float4 smem_[];
  __shared__ acc_t slots[2][32 * K];  // cluster_sum's, by parity
  // kCluster > 1 (sm_90): the kCluster blocks of a cluster share rows, block r owning slice r of the columns
  const int n = N / kCluster, col0 = int(blockIdx.x % kCluster) * n, G = gridDim.x / kCluster;
  const T *x = x_ + col0, *dy = dy_ + col0, *w = w_ + col0, *dh = dh_ ? dh_ + col0 : nullptr;
  T* dx = dx_ + col0;
  acc_t* red = reinterpret_cast<acc_t*>(smem_);  // [2][32 warps][K]
  acc_t* acc = red + 2 * 32 * 2 + threadIdx.y * K * n;
  const int packs = n / kVec, R = blockDim.y;
  const acc_t inv_n = acc_t(1) / N;
  const auto each_pack = [&](auto&& f) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int c = threadIdx.x + p * blockDim.x;
      if (c < packs) f(p, c);
    }
  };
  each_pack([&](int, int c) {
#pragma unroll
    for (int q = 0; q < K; ++q)
#pragma unroll
      for (int k = 0; k < kVec; k += C) reinterpret_cast<A*>(acc + q * n + c * kVec + k)[0] = A{};
  });
  const auto load = [&](Row<T, kVec, kPacks>& r, int64_t row) {
    each_pack([&](int p, int c) {
      r.x[p].load(x + row * N + c * kVec);
      r.g[p].load(dy + row * N + c * kVec);
    });
    if constexpr (kNorm == Norm::kLayer) r.mean = mean[row];
    r.rstd = rstd[row];
  };
  const auto process = [&](const Row<T, kVec, kPacks>& cur, int64_t row, int parity) {
    acc_t s[K] = {};
    if (row < M) {
      each_pack([&](int p, int c) {
        Raw<T, kVec> wv;
        wv.load(w + c * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const acc_t g = cur.g[p][k] * wv[k];
          s[0] += g * (cur.x[p][k] - cur.mean) * cur.rstd;
          if constexpr (K == 2) s[1] += g;
        }
      });
    }
    group_sum(s, red + parity * 64);
    cluster_sum<kCluster>(s, slots[parity]);
    if (row < M) {
      const acc_t mgx = s[0] * inv_n;
      acc_t mg = 0;
      if constexpr (K == 2) mg = s[1] * inv_n;
      each_pack([&](int p, int c) {
        Raw<T, kVec> wv, hv;
        wv.load(w + c * kVec);
        if (dh != nullptr) hv.load(dh + row * N + c * kVec);
        acc_t out[kVec];
#pragma unroll
        for (int k0 = 0; k0 < kVec; k0 += C) {
          A aw = reinterpret_cast<A*>(acc + c * kVec + k0)[0];
          A ab;
          if constexpr (K == 2) ab = reinterpret_cast<A*>(acc + n + c * kVec + k0)[0];
#pragma unroll
          for (int k = 0; k < C; ++k) {
            const acc_t d = cur.g[p][k0 + k], xh = (cur.x[p][k0 + k] - cur.mean) * cur.rstd;
            out[k0 + k] = cur.rstd * (d * wv[k0 + k] - mg - xh * mgx);
            if (dh != nullptr) out[k0 + k] += hv[k0 + k];
            aw.v[k] += d * xh;
            if constexpr (K == 2) ab.v[k] += d;
          }
          reinterpret_cast<A*>(acc + c * kVec + k0)[0] = aw;
          if constexpr (K == 2) reinterpret_cast<A*>(acc + n + c * kVec + k0)[0] = ab;
        }
        *reinterpret_cast<Pack<T, kVec>*>(dx + row * N + c * kVec) = to_pack<T>(out);
      });
    }
  };
  const int64_t step = int64_t(G) * R, first_row = blockIdx.x / kCluster * int64_t(R);
  int64_t row = first_row + threadIdx.y;
  int parity = 0;
  if constexpr (kPrefetch<T, kVec * kPacks>) {
    Row<T, kVec, kPacks> cur;
    if (row < M) load(cur, row);
    for (int64_t first = first_row; first < M; first += step, row += step, parity ^= 1) {
      Row<T, kVec, kPacks> next;
      if (row + step < M) load(next, row + step);
      process(cur, row, parity);
      cur = next;
    }
  } else {
    for (int64_t first = first_row; first < M; first += step, row += step, parity ^= 1) {
      Row<T, kVec, kPacks> cur;
      if (row < M) load(cur, row);
      process(cur, row, parity);
    }
  }
  allow_next_grid();  // sum_partials_kernel (PDL) may launch: it waits for this grid's end
  cluster_done<kCluster>();
  __syncthreads();
  const acc_t* all = red + 2 * 32 * 2;
  for (int j = threadIdx.y * blockDim.x + threadIdx.x; j < n; j += blockDim.x * R) {
#pragma unroll
    for (int q = 0; q < K; ++q) {
      acc_t sum = 0;
      for (int r = 0; r < R; ++r) sum += all[r * K * n + q * n + j];
      partials[(q * int64_t(G) + blockIdx.x / kCluster) * N + col0 + j] = sum;
    }
  }
}

// Long rows, first kernel: one block per row, the row sums grad_x needs (sum of g * xhat, and of g) as means,
// into sums[row] and sums[M + row].
template <typename T, Norm kNorm, int kVec>
__global__ __launch_bounds__(1024) void backward_long_rows_kernel(
    const T* __restrict__ dy, const T* __restrict__ x, const Acc<T>* __restrict__ mean,
    const Acc<T>* __restrict__ rstd, const T* __restrict__ w, Acc<T>* __restrict__ sums, int64_t M, int N) {
  using acc_t = Acc<T>;
  constexpr int K = kSums<kNorm>, U = 4;
  __shared__ acc_t buf[32 * K];
  const int64_t row = blockIdx.x;
  const int packs = N / kVec;
  acc_t mu = 0;
  if constexpr (kNorm == Norm::kLayer) mu = mean[row];
  const acc_t rs = rstd[row];
  acc_t s[K] = {};
  for (int c0 = threadIdx.x; c0 < packs; c0 += U * blockDim.x) {
    Raw<T, kVec> xv[U], gv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * blockDim.x;
      if (c < packs) {
        xv[u].load(x + row * N + c * kVec);
        gv[u].load(dy + row * N + c * kVec);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * blockDim.x;
      if (c < packs) {
        Raw<T, kVec> wv;
        wv.load(w + c * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const acc_t g = gv[u][k] * wv[k];
          s[0] += g * (xv[u][k] - mu) * rs;
          if constexpr (K == 2) s[1] += g;
        }
      }
    }
  }
  group_sum(s, buf);
  if (threadIdx.x == 0) {
    sums[row] = s[0] / N;
    if constexpr (K == 2) sums[M + row] = s[1] / N;
  }
}

// Long rows, second kernel: a tile of columns (one pack per thread) over slice blockIdx.y of the rows:
// grad_x, and the slice's column sums in registers, written as row blockIdx.y of `partials`
// ([K][gridDim.y][N]).
template <typename T, Norm kNorm, int kVec>
__global__ __launch_bounds__(256) void backward_long_cols_kernel(
    const T* __restrict__ dy, const T* __restrict__ dh, const T* __restrict__ x,
    const Acc<T>* __restrict__ mean, const Acc<T>* __restrict__ rstd, const T* __restrict__ w,
    const Acc<T>* __restrict__ sums, T* __restrict__ dx, Acc<T>* __restrict__ partials, int64_t M, int N,
    int64_t rows_per_slice) {
  using acc_t = Acc<T>;
  constexpr int K = kSums<kNorm>;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= N / kVec) return;
  const int j = c * kVec;
  const int64_t r0 = blockIdx.y * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < M ? r0 + rows_per_slice : M;
  Raw<T, kVec> wv;
  wv.load(w + j);
  acc_t aw[kVec] = {}, ab[kVec] = {};
  for (int64_t r = r0; r < r1; ++r) {
    Raw<T, kVec> xv, gv, hv;
    xv.load(x + r * N + j);
    gv.load(dy + r * N + j);
    if (dh != nullptr) hv.load(dh + r * N + j);
    acc_t mu = 0, mg = 0;
    if constexpr (K == 2) mu = mean[r], mg = sums[M + r];
    const acc_t rs = rstd[r], mgx = sums[r];
    acc_t out[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const acc_t xh = (xv[k] - mu) * rs;
      out[k] = rs * (gv[k] * wv[k] - mg - xh * mgx);
      if (dh != nullptr) out[k] += hv[k];
      aw[k] += gv[k] * xh;
      if constexpr (K == 2) ab[k] += gv[k];
    }
    *reinterpret_cast<Pack<T, kVec>*>(dx + r * N + j) = to_pack<T>(out);
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    partials[blockIdx.y * int64_t(N) + j + k] = aw[k];
    if constexpr (K == 2) partials[(gridDim.y + blockIdx.y) * int64_t(N) + j + k] = ab[k];
  }
}

// Build-time settings of backward_bulk_kernel, for tuning (benchmarks/rmsnorm.py --settings).
#ifndef RMSNORM_BULK_STAGES
#define RMSNORM_BULK_STAGES 4  // the most stages of the ring (6 measured slower for 2-byte types)
#endif
#ifndef RMSNORM_BULK_RING_OFFSET
#define RMSNORM_BULK_RING_OFFSET 0  // bytes (a multiple of 16): to measure what the ring's alignment is worth
#endif
#ifndef RMSNORM_BULK_NARROW
// 2-byte types: blocks of at most this many threads (256, 512; 0: 1024), each with 1024 / it packs
#define RMSNORM_BULK_NARROW 512
#endif
#ifndef RMSNORM_BULK_PIPE_FROM
#define RMSNORM_BULK_PIPE_FROM 4  // rings of at least this many stages take the next row's pass 1 early
#endif
#ifndef RMSNORM_BULK_FIRST_ROWS
// Rows the ring starts with (0: all its stages); thread 0 starts the rest once row 0 is in. With all four
// at once, row 1 landed with every SM's four stages, 4 us after row 0 (the timeline of 2026-11-26), and row
// 0's pass waited for it. Two: the bf16 backward 0.5-3 % faster at 2^24 (LayerNorm 512 x 32768 71.0 ->
// 73.7 %), the forward within the runs' spread but for LayerNorm bf16 512 x 32768 (+3-4 %); one: slower.
// (Also measured there, no gain: row 0 exchanged and written before row 1's pass 1.)
#define RMSNORM_BULK_FIRST_ROWS 2
#endif
// The rows both bulk kernels' rings start with.
inline int first_rows(int stages) {
  return RMSNORM_BULK_FIRST_ROWS > 0 && RMSNORM_BULK_FIRST_ROWS < stages ? RMSNORM_BULK_FIRST_ROWS : stages;
}

// Rows too long for registers, on sm_90: a persistent grid of thread block clusters of C = 1, 2, 4 or 8
// blocks (C at run time), each cluster taking rows first, first + G, ... (G clusters), block r of a cluster
// owning slice r of the columns (n = N / C). The slices of x and grad_y arrive by bulk copy (bulk_copy.cuh:
// one instruction each, counted by an mbarrier) into a ring of `stages` shared-memory buffers, the next rows'
// while this one is worked on, so the SM always has rows in flight whatever its threads wait for. Each row:
// the two row sums from shared memory (group_sum, then pushed into every block of the cluster, each of which
// waits only for the C deliveries it needs: pass1 and gather below, no cluster barrier), then grad_x from
// shared memory again, and the columns' sums of grad_w and grad_b in registers (kPacks packs of
// kVec columns per thread); at the end each cluster writes one row of `partials` ([K][G][N]). Why: the
// long-row pair reads x and grad_y twice from memory (5 M N), this kernel once (3 M N), and the rows in
// registers over a cluster (backward_kernel with kCluster 4 or 8) stall on each row's barriers with at
// most one row in flight.
template <typename T, Norm kNorm, int kVec, int kPacks, int kThreads = 1024>
__global__ __launch_bounds__(kThreads) void backward_bulk_kernel(
    const T* __restrict__ dy_, const T* __restrict__ dh_, const T* __restrict__ x_,
    const Acc<T>* __restrict__ mean, const Acc<T>* __restrict__ rstd, const T* __restrict__ w_,
    T* __restrict__ dx_, Acc<T>* __restrict__ partials, int64_t M, int N, int stages, bool pipe,
    int first_rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using acc_t = Acc<T>;
  constexpr int K = kSums<kNorm>;
  static_assert(sizeof(acc_t) == 4 && kVec % 4 == 0, "float, half and bf16, in 16-byte packs");
  // the ring (dynamic shared memory), 128-byte aligned: bulk copies into a ring 16 bytes off ran 7-9 % slower
  extern __shared__ __align__(128) unsigned char bulk_smem_[];
  __shared__ acc_t red[2][32 * K];                           // group_sum's, by parity
  constexpr int X = 4;                                       // rows of the cluster's exchange in flight
  __shared__ acc_t slots[X][8][K];                           // the cluster's blocks' row sums, by rank
  __shared__ alignas(8) uint64_t bars[RMSNORM_BULK_STAGES];  // one mbarrier per stage
  __shared__ alignas(8) uint64_t xbars[X];                   // one per exchange slot (deliver_sums)
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int C = int(cluster.num_blocks()), n = N / C, col0 = int(cluster.block_rank()) * n;
  const int64_t G = gridDim.x / C, first = blockIdx.x / C;
  const int64_t rows = first < M ? (M - first + G - 1) / G : 0;  // this cluster's
  const T *x = x_ + col0, *dy = dy_ + col0, *w = w_ + col0, *dh = dh_ ? dh_ + col0 : nullptr;
  T* dx = dx_ + col0;
  // stage s of the ring: x's slice [n], then grad_y's [n]
  T* ring = reinterpret_cast<T*>(bulk_smem_ + RMSNORM_BULK_RING_OFFSET);
  const uint32_t bytes = uint32_t(n) * sizeof(T);
  const auto fetch = [&](int64_t k, int s) {  // thread 0: row first + k G into stage s
    const int64_t row = first + k * G;
    bulk::arrive_expect(&bars[s], 2 * bytes);
    bulk::copy(ring + int64_t(s) * 2 * n, x + row * N, bytes, &bars[s]);
    bulk::copy(ring + int64_t(s) * 2 * n + n, dy + row * N, bytes, &bars[s]);
  };
  start_ring(bars, stages, xbars, X, C, rows, first_rows, fetch);
  const int packs = n / kVec;
  acc_t wv[kPacks][kVec] = {}, aw[kPacks][kVec] = {}, ab[kPacks][kVec] = {};  // weights as floats
#pragma unroll
  for (int p = 0; p < kPacks; ++p)
    if (threadIdx.x + p * blockDim.x < packs) {
      Raw<T, kVec> v;
      v.load(w + (threadIdx.x + p * blockDim.x) * kVec);
#pragma unroll
      for (int j = 0; j < kVec; ++j) wv[p][j] = v[j];
    }
  acc_t mu_pre = 0, rs_pre = 0;  // the statistics of the next row pass 1 takes, loaded a row ahead
  if (rows > 0) {
    if constexpr (kNorm == Norm::kLayer) mu_pre = mean[first];
    rs_pre = rstd[first];
  }
  const acc_t inv_n = acc_t(1) / N;
  // Pass 1 of row k: its statistics (loaded a row ahead), the wait for its stage, the block's two sums, and
  // (cluster) their delivery to every block of the cluster (deliver_sums).
  RingCursor next;  // the stage (and phase) of the next row pass 1 takes
  const auto pass1 = [&](int64_t k, acc_t& mu, acc_t& rs, acc_t(&sums)[K]) {
    mu = mu_pre, rs = rs_pre;
    if (k + 1 < rows) {
      if constexpr (kNorm == Norm::kLayer) mu_pre = mean[first + (k + 1) * G];
      rs_pre = rstd[first + (k + 1) * G];
    }
    const T* xs = ring + int64_t(next.stage) * 2 * n;
    bulk::wait(&bars[next.stage], next.phase);
    next.advance(stages);
    if (k == 0) fill_ring(stages, rows, first_rows, fetch);
#pragma unroll
    for (int q = 0; q < K; ++q) sums[q] = 0;  // of g * xhat, and (LayerNorm) of g, with g = grad_y * w
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int c = threadIdx.x + p * blockDim.x;
      if (c < packs) {
        Raw<T, kVec> xv, gv;
        xv.load(xs + c * kVec);
        gv.load(xs + n + c * kVec);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const acc_t g = gv[j] * wv[p][j];
          sums[0] += g * (kNorm == Norm::kLayer ? xv[j] - mu : acc_t(xv[j]));  // times rstd below
          if constexpr (K == 2) sums[1] += g;
        }
      }
    }
    sums[0] *= rs;
    group_sum(sums, red[k & 1]);
    if (blockDim.x == 32) __syncthreads();  // (group_sum has none of its own for one warp)
    if (C > 1 && threadIdx.x < C) deliver_sums<K, X>(slots, xbars, k, C, int(cluster.block_rank()), sums);
  };
  // The cluster's sums of row k: wait for the C blocks' deliveries, add them in rank order (the same bits
  // in every block).
  const auto gather = [&](int64_t k, acc_t(&sums)[K]) {
    if (C > 1) {
      const int x = int(k % X);
      bulk::wait_cluster(&xbars[x], uint32_t(k / X) & 1);
#pragma unroll
      for (int q = 0; q < K; ++q) sums[q] = 0;
      for (int r = 0; r < C; ++r)
#pragma unroll
        for (int q = 0; q < K; ++q) sums[q] += slots[x][r][q];
    }
  };
  // Pass 2 of row k: grad_x from its stage, and the column sums.
  const auto pass2 = [&](int64_t k, int s, acc_t mu, acc_t rs, const acc_t(&sums)[K]) {
    const int64_t row = first + k * G;
    const T* xs = ring + int64_t(s) * 2 * n;
    // grad_x = rstd * (g - mean(g)) - xhat * (rstd * mean(g * xhat))
    const acc_t mgx = sums[0] * inv_n * rs, mg = K == 2 ? sums[K - 1] * inv_n * rs : acc_t(0);
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int c = threadIdx.x + p * blockDim.x;
      if (c < packs) {
        Raw<T, kVec> xv, gv, hv;
        xv.load(xs + c * kVec);
        gv.load(xs + n + c * kVec);
        if (dh != nullptr) hv.load(dh + row * N + c * kVec);
        acc_t out[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const acc_t d = gv[j], xh = (kNorm == Norm::kLayer ? xv[j] - mu : acc_t(xv[j])) * rs;
          out[j] = rs * (d * wv[p][j]) - mg - xh * mgx;
          if (dh != nullptr) out[j] += hv[j];
          aw[p][j] += d * xh;
          if constexpr (K == 2) ab[p][j] += d;
        }
        *reinterpret_cast<Pack<T, kVec>*>(dx + row * N + c * kVec) = to_pack<T>(out);
      }
    }
  };
  // Row by row; `pipe` (deep rings): row k + 1's pass 1 before row k's gather, so that the cluster's
  // exchange of row k waits behind work. Each row's stage is refilled after the first block barrier that
  // follows its pass 2 (in pass 1 of the next row but one, or of the next row with `pipe`).
  acc_t mu, rs, sums[K], mu1 = 0, rs1 = 0, sums1[K] = {};
  if (pipe && rows > 0) pass1(0, mu, rs, sums);
  for (int64_t k = 0, s = 0; k < rows; ++k, s = s + 1 == stages ? 0 : s + 1) {  // s: row k's stage
    if (!pipe) pass1(k, mu, rs, sums);
    if (pipe && k + 1 < rows) pass1(k + 1, mu1, rs1, sums1);
    if (threadIdx.x == 0 && k >= 1 && k - 1 + stages < rows)
      fetch(k - 1 + stages, int(s == 0 ? stages : s) - 1);
    gather(k, sums);
    pass2(k, int(s), mu, rs, sums);
    if (pipe) {
      mu = mu1, rs = rs1;
#pragma unroll
      for (int q = 0; q < K; ++q) sums[q] = sums1[q];
    }
  }
  allow_next_grid();  // sum_partials_kernel (PDL) may launch: it waits for this grid's end
  // No thread reads the ring now. (No cluster barrier: every delivery into this block has landed before its
  // last gather returned, and no block sends any after its last row. A cluster barrier here, with its fence,
  // waited for the last row's stores of grad_x.)
#ifdef RMSNORM_BULK_END_SYNC
  if (C > 1) cluster.sync();
#endif
  __syncthreads();
  // The block's slice of the cluster's partial row(s), through the ring (free now): thread c's kVec columns
  // are adjacent, so its float4 stores straight from registers left every other 32-byte sector of a warp's
  // store half written (Nsight Compute: 9 % of the kernel's sectors excessive); from shared memory each warp
  // writes 512 contiguous bytes.
  acc_t* cs = reinterpret_cast<acc_t*>(bulk_smem_ + RMSNORM_BULK_RING_OFFSET);  // [K][n]
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int c = threadIdx.x + p * blockDim.x;
    if (c < packs)
#pragma unroll
      for (int j = 0; j < kVec; j += 4) {
        *reinterpret_cast<float4*>(cs + c * kVec + j) =
            make_float4(aw[p][j], aw[p][j + 1], aw[p][j + 2], aw[p][j + 3]);
        if constexpr (K == 2)
          *reinterpret_cast<float4*>(cs + n + c * kVec + j) =
              make_float4(ab[p][j], ab[p][j + 1], ab[p][j + 2], ab[p][j + 3]);
      }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < K * n / 4; i += blockDim.x) {
    const int q = K == 2 && i * 4 >= n ? 1 : 0, col = i * 4 - q * n;
    *reinterpret_cast<float4*>(partials + (q * G + first) * N + col0 + col) =
        *reinterpret_cast<const float4*>(cs + i * 4);
  }
#else
  __trap();  // never launched: plan_bulk checks that this kernel was built for sm_90 or newer
#endif
}

// grad_w (blockIdx.y == 0) or grad_b (1, LayerNorm): the sum of the G partial rows of each column, the way
// lesson 03's sum_partials_kernel (layernorm.cu) adds them, with grad_weight's type P and PDL. A block is
// 32 x kSegs threads: thread x owns kCols adjacent columns (one 16-byte load per partial row where N allows),
// thread y adds rows y, y + kSegs, y + 2 kSegs, ... in row order, four of them in flight at a time, then the
// kSegs sums of each column are added in order through shared memory: the same bits on every run. Launched
// with PDL after the kernel that writes the partial rows (that kernel allows it once its rows are done), so
// its launch hides behind that kernel's end (1.4-1.8 us of a 57 us bfloat16 backward of 512 x 32768). Before,
// one thread per column walked all G rows four loads at a time, G / 4 rounds of L2 latency: slow where G is
// large (backward_kernel's grids; float32 2048 x 8192 went 81 -> 87 % of a copy). P is T, or float for
// float32 parameters beside a half/bf16 x.
template <typename T, typename P, int kCols>
__global__ __launch_bounds__(256) void sum_partials_kernel(const Acc<T>* __restrict__ partials, int G, int N,
                                                           P* __restrict__ dw, P* __restrict__ db) {
  using acc_t = Acc<T>;
  using A = Pack<acc_t, kCols>;
  constexpr int kSegs = 8, kAhead = 4;
  __shared__ acc_t part[kSegs][32 * kCols];
  const int j0 = blockIdx.x * 32 * kCols, j = j0 + threadIdx.x * kCols;
  const acc_t* src = partials + int64_t(blockIdx.y) * G * N + j;
  wait_for_previous_grid();  // the partial rows are complete and visible
  acc_t s[kCols] = {};
  if (j < N) {
    for (int g = threadIdx.y; g < G; g += kSegs * kAhead) {
      A v[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u)
        v[u] = g + u * kSegs < G ? *reinterpret_cast<const A*>(src + int64_t(g + u * kSegs) * N) : A{};
#pragma unroll
      for (int u = 0; u < kAhead; ++u)
#pragma unroll
        for (int k = 0; k < kCols; ++k) s[k] += v[u].v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < kCols; ++k) part[threadIdx.y][threadIdx.x * kCols + k] = s[k];
  __syncthreads();
  const int t = threadIdx.y * 32 + threadIdx.x;  // one column of the block's 32 * kCols
  if (t < 32 * kCols && j0 + t < N) {
    acc_t sum = 0;
#pragma unroll
    for (int i = 0; i < kSegs; ++i) sum += part[i][t];
    P* out = blockIdx.y == 0 ? dw : db;
    if constexpr (std::is_same_v<P, T>)
      out[j0 + t] = from_acc<T>(sum);
    else
      out[j0 + t] = static_cast<P>(sum);
  }
}

// ------------------------------------------------------------------------------------------------
// Host side. The .cpp guarantees M > 0, 0 < N < 2^31, pointers on the current device.
// ------------------------------------------------------------------------------------------------

// Thread block clusters: sm_90 and newer (off with -DRMSNORM_NO_CLUSTERS, to measure what they gain).
inline bool has_clusters() {
#ifdef RMSNORM_NO_CLUSTERS
  return false;
#else
  return device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9;
#endif
}

// The main kernels (forward_kernel, forward_bulk_kernel, backward_bulk_kernel) launch with PDL (common.h) and
// wait for the kernel before them (wait_for_previous_grid) before they touch global memory: in a stream of
// kernels, as in a training step, their launch and set-up (barriers, the cluster's sync) overlap the end of
// the kernel before. H100, back-to-back calls timed by events around 20 of them (results/h100/
// norm_pdl_2026-11-27.md): bf16 512 x 32768 backward 77.9 -> 81.0 % of a copy (LayerNorm), forward 88.4 ->
// 92.8 %; rows in registers 96.7 -> 102.4 % (RMSNorm bf16 2048 x 8192). A call timed alone after an L2 flush
// (do_bench) does not change. RMSNORM_NO_PDL_MAIN (build time) or COURSE_NO_PDL=1 (run time): off.
#ifdef RMSNORM_NO_PDL_MAIN
constexpr bool kPdlMain = false;
#else
constexpr bool kPdlMain = true;
#endif

// forward_kernel's block for rows of N values in kPacks packs of kVec per thread: a row group of whole warps
// (x: threads per row), y: rows per block, at least 4 warps; x == 0 where a row needs more than 1024 threads.
template <int kVec, int kPacks>
dim3 forward_block(int N) {
  const int threads = row_threads(N / kVec, kPacks);
  return dim3(threads, threads == 0 || threads >= 128 ? 1 : 128 / threads);
}

// Whether forward_kernel's grid for M rows is one wave: every thread resident at once at the 64 registers a
// thread of a 1024-thread block may use (1024 threads per SM). Then 2-byte rows load the weights with the row
// (kFew). Beyond it they lost: bf16 1024 x 4096 7.4 -> 8.5 us, 8192 x 256 4.8 -> 5.1 us (twice the threads of
// one wave), and at its edge so did RMSNorm bf16 4096 x 256, 3.4 -> 3.6 us (LayerNorm there: 3.8 -> 3.6 us;
// results/h100/norm_small_forward_2026-11-27.md).
template <int kVec, int kPacks>
bool forward_one_wave(int64_t M, int N) {
  const dim3 block = forward_block<kVec, kPacks>(N);
  return block.x > 0 && ceil_div<int64_t>(M, block.y) * block.x * block.y <= int64_t(num_sms()) * 1024;
}

// forward_kernel with kPacks packs of kVec values per thread (forward_block) and kRows rows per row group;
// false (nothing launched) where a row needs more than 1024 threads.
template <typename T, Norm kNorm, bool kAdd, int kVec, int kPacks, int kRows = 1>
bool launch_forward_rows(const T* x, const T* res, const T* w, const T* b, T* y, T* h, Acc<T>* mean,
                         Acc<T>* rstd, int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  const dim3 block = forward_block<kVec, kPacks>(N);
  if (block.x == 0) return false;
  const dim3 grid(unsigned(ceil_div<int64_t>(M, int64_t(block.y) * kRows)));
  // kFew where it makes a different kernel; not for the fused add, whose small batches were not measured
  constexpr bool kCanFew =
      kRows == 1 && !kAdd &&
      ((kEarlyParams<T, kNorm, kVec, kPacks, true> && !kEarlyParams<T, kNorm, kVec, kPacks, false>) ||
       kLateParams<T, kNorm, kVec, kPacks>);
  if (kCanFew && forward_one_wave<kVec, kPacks>(M, N))
    launch(forward_kernel<T, kNorm, kAdd, kVec, kPacks, kCanFew>, grid, block, 0, stream,
           {false, kPdlMain, 1}, x, res, w, b, y, h, mean, rstd, M, N, eps);
  else
    launch(forward_kernel<T, kNorm, kAdd, kVec, kPacks, false, kRows>, grid, block, 0, stream,
           {false, kPdlMain, 1}, x, res, w, b, y, h, mean, rstd, M, N, eps);
  COURSE_LAUNCH_CHECK();
  return true;
}

// Short rows: forward_kernel's rows per row group for an M x N forward (T, vectorizable), 4 or 2 where a row
// takes one or two warps holding 16 or 32 bytes of it per thread, so that every thread has 64 bytes in
// flight and loads the weight once for all its rows; 1 elsewhere. Only where the one-row grid is more than
// 1.5 waves of full SMs: H100, do_bench, % of a copy, HEAD -> kRows
// (results/h100/norm_short_rows_2026-11-27.md): RMSNorm bf16 256 wide 84.4 -> 95.6 (2^22 elements, 1.9
// waves), 91.8 -> 98.1 (2^24); LayerNorm float32 256 wide 88.3 -> 97.7 (2^22); but bf16 8192 x 512 and 4096 x
// 1024 (2^22, one wave) lost 110 -> 98 % (half the warps to hide the latency with). RMSNORM_FWD_SHORT_ROWS 0
// turns it off (a build-time setting).
#ifndef RMSNORM_FWD_SHORT_ROWS
#define RMSNORM_FWD_SHORT_ROWS 1
#endif
template <typename T>
int forward_short_rows(int64_t M, int N) {
  constexpr int V = kPack16<T>, P16 = 16 / V;
  if (!RMSNORM_FWD_SHORT_ROWS) return 1;
  const int threads = row_threads(N / V, P16);
  if (threads == 0 || threads > 64) return 1;
  const int packs = ceil_div(N / V, threads);  // per thread
  if (packs > 2) return 1;
  const int64_t wave = int64_t(num_sms()) * device_attribute<cudaDevAttrMaxThreadsPerMultiProcessor>();
  return 2 * M * threads > 3 * wave ? 4 / packs : 1;
}

// forward_kernel with forward_short_rows's rows per row group; false (nothing launched) where that is 1, or
// for the fused add (two loads per pack already; not measured).
template <typename T, Norm kNorm, bool kAdd>
bool launch_forward_short_rows(const T* x, const T* res, const T* w, const T* b, T* y, T* h, Acc<T>* mean,
                               Acc<T>* rstd, int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  constexpr int V = kPack16<T>;
  if constexpr (kAdd) {
    return false;
  } else {
    switch (forward_short_rows<T>(M, N)) {
      case 4:
        return launch_forward_rows<T, kNorm, kAdd, V, 1, 4>(x, res, w, b, y, h, mean, rstd, M, N, eps,
                                                            stream);
      case 2:
        return launch_forward_rows<T, kNorm, kAdd, V, 2, 2>(x, res, w, b, y, h, mean, rstd, M, N, eps,
                                                            stream);
      default:
        return false;
    }
  }
}

// The most bytes of a row one block of a forward cluster keeps (a build-time setting, for tuning): by default
// as many as its shared memory holds; smaller slices mean more, smaller blocks per SM.
#ifndef RMSNORM_FWD_SLICE_BYTES
#define RMSNORM_FWD_SLICE_BYTES (1 << 30)
#endif
constexpr size_t kFwdSliceBytes = RMSNORM_FWD_SLICE_BYTES;

// forward_long_kernel over a cluster of 2, 4 or 8 blocks per row (the fewest whose slices fit in shared
// memory and in kFwdSliceBytes), sm_90; false (nothing launched) where none fits.
template <typename T, Norm kNorm, bool kAdd, int kVec, int kCluster>
bool launch_forward_cluster(const T* x, const T* res, const T* w, const T* b, T* y, T* h, Acc<T>* mean,
                            Acc<T>* rstd, int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  if constexpr (kCluster > 8) {
    return false;
  } else {
    const int per = ceil_div(N / kVec, kCluster);
    const size_t bytes = size_t(per) * kVec * sizeof(T);
    const int threads = per >= 4 * 1024 ? 1024 : 512;
    const auto kernel = forward_long_kernel<T, kNorm, kAdd, kVec, kCluster>;
    const bool fits = bytes + 2 * 33 * sizeof(Acc<T>) <=
                          size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) &&
                      (bytes <= kFwdSliceBytes || kCluster == 8) &&
                      blocks_per_sm(reinterpret_cast<const void*>(kernel), threads, bytes) > 0;
    if (!fits)
      return launch_forward_cluster<T, kNorm, kAdd, kVec, 2 * kCluster>(x, res, w, b, y, h, mean, rstd, M, N,
                                                                        eps, stream);
    launch(kernel, dim3(unsigned(M * kCluster)), dim3(threads), bytes, stream, {false, false, kCluster}, x,
           res, w, b, y, h, mean, rstd, N, eps, true);
    return true;
  }
}

template <typename T, Norm kNorm, bool kAdd, int kVec>
void launch_forward_long(const T* x, const T* res, const T* w, const T* b, T* y, T* h, Acc<T>* mean,
                         Acc<T>* rstd, int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  const size_t bytes = size_t(N) * sizeof(T);
  const int threads = N / kVec >= 4 * 1024 ? 1024 : 512;
  const auto kernel = forward_long_kernel<T, kNorm, kAdd, kVec>;
  const bool keep = bytes + 2 * 32 * sizeof(Acc<T>) <=
                        size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) &&
                    blocks_per_sm(reinterpret_cast<const void*>(kernel), threads, bytes) > 0;
  // Too long for one block's shared memory: the row over a cluster's (sm_90), else read again.
  if ((!keep || bytes > kFwdSliceBytes) && has_clusters() &&
      launch_forward_cluster<T, kNorm, kAdd, kVec, 2>(x, res, w, b, y, h, mean, rstd, M, N, eps, stream))
    return;
  kernel<<<unsigned(M), threads, keep ? bytes : 0, stream>>>(x, res, w, b, y, h, mean, rstd, N, eps, keep);
  COURSE_LAUNCH_CHECK();
}

// forward_bulk_kernel's packs per thread: 2, 4 or 8 (the fewest that cover a slice), the kernel of each.
constexpr int kFwdBulkThreads = RMSNORM_FWD_BULK_THREADS, kFwdBulkStages = RMSNORM_FWD_BULK_STAGES;
constexpr int kFwdBulkMostPacks = 8;
template <typename T, Norm kNorm, bool kAdd>
auto forward_bulk(int packs) {
  constexpr int V = kPack16<T>, B = kFwdBulkThreads, P = kFwdBulkMostPacks;
  return packs <= 2   ? forward_bulk_kernel<T, kNorm, kAdd, V, 2, B>
         : packs <= 4 ? forward_bulk_kernel<T, kNorm, kAdd, V, 4, B>
                      : forward_bulk_kernel<T, kNorm, kAdd, V, P, B>;
}

// forward_bulk_kernel's launch: the fewest blocks per row (1, 2, 4 or 8; at least
// RMSNORM_FWD_BULK_MIN_CLUSTER) whose slices fit kFwdBulkMostPacks packs per thread and leave room for 3
// stages in shared memory, twice as many while the rows are too few to fill the GPU otherwise; a persistent
// grid of as many clusters as are resident at once (at most M). clusters == 0 (no plan) where none fits, or
// the kernel was built for an older GPU.
struct ForwardBulkPlan {
  int cluster = 1, clusters = 0, stages = 0, packs = 0;
  size_t smem = 0;
};

template <typename T, Norm kNorm, bool kAdd>
ForwardBulkPlan plan_forward_bulk(int64_t M, int N) {
  ForwardBulkPlan plan;
  if constexpr (sizeof(Acc<T>) == 4) {
    constexpr int V = kPack16<T>;
    if (!has_clusters() ||
        layernorm::ptx_version(reinterpret_cast<const void*>(forward_bulk<T, kNorm, kAdd>(8))) < 90)
      return plan;  // (built for an older GPU: the body is a trap)
    const size_t room = size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) - 1024;  // static
    const int64_t sms = num_sms();
    for (int cluster = RMSNORM_FWD_BULK_MIN_CLUSTER; cluster <= 8; cluster *= 2) {
      if (N % (cluster * V) != 0) continue;
      const int packs = ceil_div(N / cluster / V, kFwdBulkThreads);
      // LayerNorm's 2-byte rows over 65536: at most 4 packs per thread, so clusters of 8 (H100, 2026-11-27,
      // bf16 128 x 131072: 82 % of a copy against 78-80 % with 8 packs over clusters of 4)
      if (packs > (kNorm == Norm::kLayer && sizeof(T) == 2 && N > 65536 ? 4 : kFwdBulkMostPacks)) continue;
      const size_t stage = (kAdd ? 2 : 1) * size_t(N / cluster) * sizeof(T);
      const int stages = int(room / stage < size_t(kFwdBulkStages) ? room / stage : kFwdBulkStages);
      if (stages < 3) continue;
      const void* fn = reinterpret_cast<const void*>(forward_bulk<T, kNorm, kAdd>(packs));
      const int clusters = active_clusters(fn, kFwdBulkThreads, stages * stage, cluster);
      if (clusters == 0) continue;
      plan.cluster = cluster;
      plan.clusters = int(clusters < M ? clusters : M);
      plan.stages = stages;
      plan.packs = packs;
      plan.smem = stages * stage;
      if (M * cluster * 2 > sms) break;  // enough rows; else twice the blocks per row, where they fit
    }
  }
  return plan;
}

#ifndef RMSNORM_FWD_BULK_2BYTE_ROUNDS
// 2-byte rows too long for registers, batches of more than SMs / 4 rows: forward_bulk_kernel from this many
// rows per cluster (rounds of the grid), else forward_long_kernel (the norms without the fused add)
#define RMSNORM_FWD_BULK_2BYTE_ROUNDS 3
#endif

// Forward bulk copies (off with -DRMSNORM_NO_FWD_BULK, to measure what they gain).
#ifdef RMSNORM_NO_FWD_BULK
constexpr bool kFwdBulk = false;
#else
constexpr bool kFwdBulk = RMSNORM_FWD_BULK_FROM > 0;
#endif

// forward_bulk_kernel where it measured faster than forward_kernel (rows in registers, up to 32 values per
// thread) and forward_long_kernel (H100, results/h100/rmsnorm_forward_bulk_2026-11-26.md), from
// RMSNORM_FWD_BULK_FROM (16384) columns:
// - rows in registers: RMSNorm of 2-byte types and LayerNorm (bf16 RMSNorm 512 x 32768: 96 % of a copy
//   against 79 %), where each cluster gets two rows or more (one row each: nothing hides the wait for a whole
//   slice; 64 x 16384 bf16 75 % against 82 %); not float RMSNorm (97.6 % either way at 2048 x 32768) nor the
//   fused add (bf16 1024 x 16384: 93 % against 98 %);
// - longer rows: float ones (RMSNorm 256 x 65536 89 % against 81 %, LayerNorm 83 % against 69 %, the fused
//   add 90 % against 85 %), and 2-byte ones in small batches (M <= SMs / 4, e.g. 16 x 65536 bf16: 63 %
//   against 61 %, 1 x 65536: 63 % against 46 %) or of RMSNORM_FWD_BULK_2BYTE_ROUNDS rows per cluster
//   (2026-11-27, since the exchange by st.async and the counted ring: bf16 256 x 65536 RMSNorm 98.0 %
//   against 89.2 % at 3.9 rows per cluster of 2, LayerNorm 84.8 % against 79.9 % at 8.5 per cluster of 4,
//   and 88-92 % over clusters of 2 since its 8 packs of weights stopped spilling, results/h100/
//   norm_forward_opaque_weights_2026-11-27.md; 64 x 262144 RMSNorm 88.9 % against 63.1 %); between them
//   forward_long_kernel (LayerNorm bf16 64 x 65536, 2.1 rows per cluster: 68.6 % against 63.2 %); not the
//   fused add's (bf16 256 x 65536: 90.1 % against 94.8 % in the grids of 2026-11-27).
// false: nothing launched.
template <typename T, Norm kNorm, bool kAdd>
bool launch_forward_bulk(const T* x, const T* res, const T* w, const T* b, T* y, T* h, Acc<T>* mean,
                         Acc<T>* rstd, int64_t M, int N, Acc<T> eps, bool in_registers, cudaStream_t stream) {
  if constexpr (sizeof(Acc<T>) == 4) {
    if (!kFwdBulk || N < RMSNORM_FWD_BULK_FROM) return false;
    if (in_registers && (kAdd || (sizeof(T) == 4 && kNorm == Norm::kRms))) return false;
    const ForwardBulkPlan plan = plan_forward_bulk<T, kNorm, kAdd>(M, N);
    if (plan.clusters == 0 || (in_registers && M <= plan.clusters)) return false;
    if (!in_registers && sizeof(T) == 2 && M * 4 > num_sms() &&
        (kAdd || M < RMSNORM_FWD_BULK_2BYTE_ROUNDS * plan.clusters))
      return false;
    launch(forward_bulk<T, kNorm, kAdd>(plan.packs), dim3(unsigned(plan.clusters * plan.cluster)),
           dim3(kFwdBulkThreads), plan.smem, stream, {false, kPdlMain, plan.cluster}, x, res, w, b, y, h,
           mean, rstd, M, N, eps, plan.stages, plan.stages >= RMSNORM_BULK_PIPE_FROM,
           first_rows(plan.stages));
    COURSE_LAUNCH_CHECK();
    return true;
  }
  return false;
}

// The most values of a row one thread of forward_kernel holds: 16, or 32 (rows up to 32768 in registers);
// longer rows take forward_long_kernel (a build-time setting, for tuning).
#ifndef RMSNORM_FWD_MAX_VALUES
#define RMSNORM_FWD_MAX_VALUES 32
#endif
constexpr int kFwdMaxValues = RMSNORM_FWD_MAX_VALUES;

// The fast forward: on sm_90, forward_bulk_kernel where launch_forward_bulk takes the shape; else rows in
// registers (16 values per thread, 32 where a row needs more than 1024 threads at 16), else one block per
// row, or a cluster of blocks per row where one block's shared memory cannot hold it (sm_90); one value per
// pack where the row is not vectorizable. (Rows in registers over a thread block cluster, as backward does,
// measured slower: results/h100/rmsnorm_2026-11-26.md.)
template <typename T, Norm kNorm, bool kAdd>
void launch_forward(const T* x, const T* res, const T* w, const T* b, T* y, T* h, Acc<T>* mean, Acc<T>* rstd,
                    int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  constexpr int V = kPack16<T>, P16 = 16 / V > 0 ? 16 / V : 1;
  if (vectorizable<T>(N, {x, res ? res : x, w, b ? b : w, y, h ? h : y})) {
    const bool in_registers = row_threads(N / V, kFwdMaxValues >= 32 ? 2 * P16 : P16) != 0;
    if (launch_forward_bulk<T, kNorm, kAdd>(x, res, w, b, y, h, mean, rstd, M, N, eps, in_registers, stream))
      return;
    if (launch_forward_short_rows<T, kNorm, kAdd>(x, res, w, b, y, h, mean, rstd, M, N, eps, stream)) return;
    if (launch_forward_rows<T, kNorm, kAdd, V, P16>(x, res, w, b, y, h, mean, rstd, M, N, eps, stream))
      return;
    if (kFwdMaxValues >= 32 &&
        launch_forward_rows<T, kNorm, kAdd, V, 2 * P16>(x, res, w, b, y, h, mean, rstd, M, N, eps, stream))
      return;
    launch_forward_long<T, kNorm, kAdd, V>(x, res, w, b, y, h, mean, rstd, M, N, eps, stream);
  } else {
    if (launch_forward_rows<T, kNorm, kAdd, 1, 16>(x, res, w, b, y, h, mean, rstd, M, N, eps, stream)) return;
    launch_forward_long<T, kNorm, kAdd, 1>(x, res, w, b, y, h, mean, rstd, M, N, eps, stream);
  }
}

// How the fast backward runs. kind 1: backward_kernel, packs of kVec (vectorized) or 1, rows over `cluster`
// blocks; 2: the long-row pair; 3: backward_bulk_kernel over `cluster` blocks per row; 4: lesson 03's
// backward_v2_bulk_kernel<kRms> (layernorm_bulk.cuh: whole rounds of rows by bulk copy, a cooperative grid
// that finishes grad_weight itself). blocks: the grid of backward_kernel, or the row slices of the long pair;
// partial_rows(): the rows of partial sums (one per cluster).
struct Plan {
  int kind = 0;
  bool vec = false;
  int packs = 0;
  int cluster = 1;
  dim3 block;
  int blocks = 0;
  size_t smem = 0;
  int stages = 0;     // kind 3: the ring's
  bool pipe = false;  // kind 3: the next row's pass 1 before this row's exchange
  int partial_rows() const { return blocks / cluster; }
};

template <typename T, Norm kNorm, int kVec, int kPacks, int kCluster = 1>
Plan plan_rows(int64_t M, int N, bool vec) {
  using acc_t = Acc<T>;
  Plan plan;
  if (N % (kCluster * kVec) != 0) return plan;
  const int n = N / kCluster;
  const int threads = row_threads(n / kVec, kPacks);
  if (threads == 0) return plan;
  const size_t fixed = 2 * 32 * 2 * sizeof(acc_t), per_row = size_t(kSums<kNorm>) * n * sizeof(acc_t);
  const int64_t fit =
      (int64_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) - int64_t(fixed)) /
      int64_t(per_row);
  int64_t rows = 1024 / threads;
  rows = rows < fit ? rows : fit;
  rows = rows < M ? rows : M;
  if (rows < 1) return plan;
  plan.block = dim3(threads, unsigned(rows));
  plan.smem = fixed + rows * per_row;
  const int per_sm =
      blocks_per_sm(reinterpret_cast<const void*>(backward_kernel<T, kNorm, kVec, kPacks, kCluster>),
                    threads * int(rows), plan.smem);
  if (per_sm == 0) return plan;
  const int64_t want = ceil_div<int64_t>(M, rows), cap = int64_t(per_sm) * num_sms() / kCluster;
  plan.blocks = int(want < cap ? want : cap) * kCluster;
  plan.kind = 1;
  plan.vec = vec;
  plan.packs = kPacks;
  plan.cluster = kCluster;
  return plan;
}

// backward_bulk_kernel's stages: at most RMSNORM_BULK_STAGES, at least 3 (two rows in flight while one is
// worked on; 2 measured slower).
constexpr int kBulkStages = RMSNORM_BULK_STAGES, kBulkMinStages = 3;

// Packs per thread of those blocks: 1024 / kNarrow (2); RMSNorm's rows that one block takes at 2048 /
// kNarrow (4): rows of 16384 at one block per row measured 79 % of a copy (bfloat16 1024 x 16384), against
// 73 % by backward_kernel. Longer rows keep 2 packs (clusters of 4 at 32768): 4 packs (clusters of 2)
// measured 2-4 % faster while the exchange waited for the row's stores (a release arrival), 1-2.5 % slower
// since (deliver_sums); LayerNorm's 4 were 3-5 % slower, its partial rows (grad_weight's, grad_bias's) twice
// as many.
#ifndef RMSNORM_BULK_NARROW_PACKS
#define RMSNORM_BULK_NARROW_PACKS (RMSNORM_BULK_NARROW > 0 ? 1024 / RMSNORM_BULK_NARROW : 1)
#endif
#ifndef RMSNORM_BULK_RMS_PACKS
#define RMSNORM_BULK_RMS_PACKS (RMSNORM_BULK_NARROW > 0 ? 2048 / RMSNORM_BULK_NARROW : 1)
#endif
constexpr int kNarrow = RMSNORM_BULK_NARROW, kNarrowPacks = RMSNORM_BULK_NARROW_PACKS;
template <Norm kNorm>
constexpr int kOneBlockPacks = kNorm == Norm::kRms ? RMSNORM_BULK_RMS_PACKS : kNarrowPacks;

// LayerNorm's batches of at most this many rows per cluster take backward_bulk_kernel over clusters of 8
// (plan_bulk). A build-time setting, for tuning; 0: off.
#ifndef RMSNORM_BULK_LAYER_WIDE_ROWS
#define RMSNORM_BULK_LAYER_WIDE_ROWS 16
#endif
constexpr int kLayerWideRows = RMSNORM_BULK_LAYER_WIDE_ROWS;

// The backward_bulk_kernel of a plan's packs per thread.
template <typename T, Norm kNorm>
auto bulk_kernel(int packs) {
  constexpr int V = kPack16<T>;
  if constexpr (kNarrow > 0 && sizeof(T) == 2 && kOneBlockPacks<kNorm> != kNarrowPacks)
    return packs == kOneBlockPacks<kNorm> ? backward_bulk_kernel<T, kNorm, V, kOneBlockPacks<kNorm>, kNarrow>
                                          : backward_bulk_kernel<T, kNorm, V, kNarrowPacks, kNarrow>;
  else if constexpr (kNarrow > 0 && sizeof(T) == 2)
    return backward_bulk_kernel<T, kNorm, V, kNarrowPacks, kNarrow>;  // (plan_bulk's packs: kNarrowPacks)
  else
    return packs == 1 ? backward_bulk_kernel<T, kNorm, V, 1> : backward_bulk_kernel<T, kNorm, V, 2>;
}

// backward_bulk_kernel (sm_90, float/half/bf16, 16-byte aligned rows): the fewest blocks per row (1, 2, 4 or
// 8) whose slices fit its threads and leave room for 3 stages of x and grad_y in shared memory; a persistent
// grid of as many clusters as are resident at once (at most M). Threads: float, blocks of up to 1024 with at
// most 2 packs each; 2-byte types, blocks of up to kNarrow (512) with kNarrowPacks (2) packs each, which
// measured 3-8 points of a copy faster than 1024 threads with 1 pack (the per-row barriers weigh more where a
// row is fewer bytes; 2 packs at 1024 threads spill), or kOneBlockPacks (RMSNorm: 4) for one block per row.
// Clusters of at least `from` blocks. No plan (kind 0) where none fits, or the kernel was built for an older
// GPU.
template <typename T, Norm kNorm>
Plan plan_bulk_from(int64_t M, int N, bool vec, int from) {
  Plan plan;
  if constexpr (sizeof(Acc<T>) == 4) {
    constexpr int V = kPack16<T>;
    constexpr bool narrow = sizeof(T) == 2 && kNarrow > 0;
    constexpr int kMostThreads = narrow ? kNarrow : 1024;
    constexpr int kMostPacks = narrow ? kNarrowPacks : (sizeof(T) == 2 ? 1 : 2);
    if (!vec || !has_clusters()) return plan;
    const size_t room = size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) - 1024;  // static
    for (int cluster = from; cluster <= 8; cluster *= 2) {
      if (N % (cluster * V) != 0) continue;
      const int packs = N / cluster / V;
      const int most = narrow && cluster == 1 ? kOneBlockPacks<kNorm> : kMostPacks;
      const int per = narrow ? most : ceil_div(packs, kMostThreads);
      if (ceil_div(packs, kMostThreads) > most) continue;
      const size_t stage = 2 * size_t(N / cluster) * sizeof(T);
      const int stages = int(room / stage < size_t(kBulkStages) ? room / stage : kBulkStages);
      if (stages < kBulkMinStages) continue;
      const int threads = ceil_div(ceil_div(packs, per), 32) * 32;
      const void* fn = reinterpret_cast<const void*>(bulk_kernel<T, kNorm>(per));
      if (layernorm::ptx_version(fn) < 90) return plan;  // built for an older GPU (its body is a trap)
      const int clusters = active_clusters(fn, threads, stages * stage + RMSNORM_BULK_RING_OFFSET, cluster);
      if (clusters == 0) continue;
      plan.kind = 3;
      plan.vec = true;
      plan.packs = per;
      plan.cluster = cluster;
      plan.block = dim3(unsigned(threads));
      plan.blocks = int(clusters < M ? clusters : M) * cluster;
      plan.smem = stages * stage + RMSNORM_BULK_RING_OFFSET;
      plan.stages = stages;
      plan.pipe = stages >= RMSNORM_BULK_PIPE_FROM;
      return plan;
    }
  }
  return plan;
}

// backward_bulk_kernel's plan: the fewest blocks per row that fit (plan_bulk_from), except LayerNorm's
// batches of at most kLayerWideRows rows per cluster, which take clusters of 8 where they fit. LayerNorm's
// two partial rows per cluster (grad_w's and grad_b's) cost as much as a row's worth of work where a cluster
// takes few rows: over clusters of 8 the grid writes and adds half or a quarter as many, which pays for the
// 8 blocks' exchange of each row's sums up to about 16 rows per cluster. H100, do_bench
// (results/h100/norm_backward_clusters_2026-11-27.md): bf16 128 x 32768 1.07-1.08x, 1024 x 16384 1.03x
// (78.3 -> 80.6 % of a copy), 512 x 32768 1.00-1.03x; float32 1.00-1.07x; at 23-31 rows per cluster
// 1.00-1.04x, at 62 (bf16 2048 x 32768) 0.98x. RMSNorm (one partial row): 0.94-0.98x.
template <typename T, Norm kNorm>
Plan plan_bulk(int64_t M, int N, bool vec) {
  const Plan plan = plan_bulk_from<T, kNorm>(M, N, vec, 1);
  if (kNorm == Norm::kLayer && plan.kind != 0 && plan.cluster < 8 &&
      M <= int64_t(kLayerWideRows) * plan.partial_rows()) {
    const Plan wide = plan_bulk_from<T, kNorm>(M, N, vec, 8);
    if (wide.kind != 0) return wide;
  }
  return plan;
}

// Rows of at least this many columns take backward_bulk_kernel where it applies, before the kernels that
// hold rows in registers (a build-time setting, for tuning; 0: only rows that no register plan takes).
#ifndef RMSNORM_BULK_FROM
#define RMSNORM_BULK_FROM 0
#endif
// 2-byte rows from this many columns (16384): backward_kernel (rows in registers) measured 72.7 % of a copy
// at bfloat16 1024 x 16384 (RMSNorm), backward_bulk_kernel 79.1 % (one block of 512 threads per row;
// LayerNorm, which came here from lesson 03's kernel at 62.0 %: 76.1 %, two blocks per row). 0: off.
#ifndef RMSNORM_BULK_2BYTE_FROM
#define RMSNORM_BULK_2BYTE_FROM 16384
#endif
template <typename T>
constexpr int kBulkFrom = RMSNORM_BULK_FROM > 0           ? RMSNORM_BULK_FROM
                          : sizeof(T) == 2 && kNarrow > 0 ? RMSNORM_BULK_2BYTE_FROM
                                                          : 0;
#ifdef RMSNORM_NO_BULK
constexpr bool kBulk = false;
#else
constexpr bool kBulk = true;
#endif

// RMSNorm's rows of one 16-byte pack per thread of a 1024-thread block (2-byte rows up to 8192, float up to
// 4096), in batches of more than RMSNORM_ROUNDS_BYTES bytes of x (so of more than 64 rows), take
// lesson 03's backward_v2_bulk_kernel (kind 4) on sm_90, as LayerNorm's 2-byte rows do: rounds of whole rows
// by bulk copy, three in flight per SM, against backward_kernel's one row prefetched into registers. H100, %
// of a copy (rmsnorm_rounds_2026-11-26.md): bfloat16 73-78 -> 83 at 65536 x 256 to 2048 x 8192, float32
// 83-85 -> 89-90 up to 4096 columns; one row of 4096 slower (bfloat16 9.6 -> 11.3 us), 16 rows equal. Small
// tensors keep the rows in registers (rmsnorm_small_backward_2026-11-27.md): up to 1 MiB of x they were
// 1.08-1.35x faster (bfloat16 64x1024 10.4 -> 8.3 us, float32 64x4096 11.3 -> 9.7 us; the grid barrier and
// the rounds' set-up cost more than the row kernel plus the kernel that adds its partial column sums); at
// 2 MiB 0.98-1.12x. Build-time settings, for tuning: RMSNORM_NO_ROUNDS (never), RMSNORM_ROUNDS_NO_FLOAT
// (2-byte rows only), RMSNORM_ROUNDS_BYTES.
#ifndef RMSNORM_ROUNDS_BYTES
#define RMSNORM_ROUNDS_BYTES (1 << 20)
#endif
template <typename T, Norm kNorm>
constexpr bool kRounds =
#if defined(RMSNORM_NO_ROUNDS)
    false;
#elif defined(RMSNORM_ROUNDS_NO_FLOAT)
    kNorm == Norm::kRms && sizeof(T) == 2;
#else
    kNorm == Norm::kRms && sizeof(T) <= 4;
#endif
template <typename T, Norm kNorm>
Plan plan_rounds(const T* dh, int64_t M, int N, bool vec) {
  Plan plan;
  if constexpr (kRounds<T, kNorm>) {
    if (!vec || dh != nullptr || M * N * int64_t(sizeof(T)) <= RMSNORM_ROUNDS_BYTES) return plan;
    // planned with grad_weight of type T: the kernel of another P has the same block and shared memory
    const layernorm::BackwardPlan p = layernorm::plan_backward_bulk<T, true>(M, N, true);
    if (p.kind != 4) return plan;
    plan.kind = 4;
    plan.vec = true;
    plan.packs = 1;
    plan.block = p.block;
    plan.blocks = p.blocks;
    plan.smem = p.smem;
  }
  return plan;
}

// Rows in registers at 8 values of x and of grad_y per thread; longer float rows by backward_bulk_kernel
// (sm_90), double ones up to twice what one block holds that way over a cluster of 2 blocks (sm_90); else 16
// values per thread; else (2-byte types) backward_bulk_kernel; else the long-row pair, over about 4 column
// tiles' worth of blocks per SM. On the H100 (results/h100/rmsnorm_bulk_backward_2026-11-26.md): rows in
// registers over clusters of 4 and 8 lost to the long-row pair; backward_bulk_kernel beat the pair
// everywhere and float rows in registers over a cluster of 2 (RMSNorm 82 % of copy against 81 %, LayerNorm
// 80 % against 59 % at 1024 x 16384), but not 2-byte rows of 16384 at 16 values per thread (61 % against 66
// %).
template <typename T, Norm kNorm>
Plan plan_backward(const T* dy, const T* dh, const T* x, const T* w, const T* dx, int64_t M, int N) {
  constexpr int V = kPack16<T>, P8 = 8 / V > 0 ? 8 / V : 1;
  const bool vec = vectorizable<T>(N, {dy, dh ? dh : dy, x, w, dx});
  Plan plan = plan_rounds<T, kNorm>(dh, M, N, vec);
  if (plan.kind != 0) return plan;
  if (kBulk && kBulkFrom<T> > 0 && N >= kBulkFrom<T>) plan = plan_bulk<T, kNorm>(M, N, vec);
  if (plan.kind != 0) return plan;
  if (vec) {
    plan = plan_rows<T, kNorm, V, P8>(M, N, true);
    if constexpr (sizeof(T) == 4)
      if (plan.kind == 0 && kBulk) plan = plan_bulk<T, kNorm>(M, N, vec);
    if constexpr (sizeof(T) >= 4)
      if (plan.kind == 0 && has_clusters()) plan = plan_rows<T, kNorm, V, P8, 2>(M, N, true);
    if (plan.kind == 0) plan = plan_rows<T, kNorm, V, 2 * P8>(M, N, true);
  } else {
    plan = plan_rows<T, kNorm, 1, 8>(M, N, false);
  }
  if (plan.kind == 0 && kBulk) plan = plan_bulk<T, kNorm>(M, N, vec);
  if (plan.kind == 0) {
    plan.kind = 2;
    plan.vec = vec;
    const int64_t tiles = ceil_div<int64_t>(N / (vec ? V : 1), 256);
    const int64_t slices = ceil_div<int64_t>(int64_t(num_sms()) * 4, tiles);
    plan.blocks = int(slices < M ? slices : M);
  }
  return plan;
}

// Acc<T> values of scratch the fast backward needs: the partial rows, and (long rows) the row sums.
template <typename T, Norm kNorm>
int64_t backward_workspace(const T* dy, const T* dh, const T* x, const T* w, const T* dx, int64_t M, int N) {
  const Plan plan = plan_backward<T, kNorm>(dy, dh, x, w, dx, M, N);
  return int64_t(kSums<kNorm>) * plan.partial_rows() * N + (plan.kind == 2 ? kSums<kNorm> * M : 0);
}

template <typename T, Norm kNorm, typename P>
void launch_backward(const T* dy, const T* dh, const T* x, const Acc<T>* mean, const Acc<T>* rstd, const T* w,
                     T* dx, P* dw, P* db, Acc<T>* workspace, int64_t M, int N, cudaStream_t stream) {
  constexpr int V = kPack16<T>, P8 = 8 / V > 0 ? 8 / V : 1;
  const Plan plan = plan_backward<T, kNorm>(dy, dh, x, w, dx, M, N);
  if (plan.kind == 1) {
    const auto go = [&](auto kernel) {
      if (plan.cluster > 1)
        launch(kernel, dim3(plan.blocks), plan.block, plan.smem, stream, {false, false, plan.cluster}, dy, dh,
               x, mean, rstd, w, dx, workspace, M, N);
      else
        kernel<<<plan.blocks, plan.block, plan.smem, stream>>>(dy, dh, x, mean, rstd, w, dx, workspace, M, N);
    };
    if (!plan.vec)
      go(backward_kernel<T, kNorm, 1, 8>);
    else if (plan.cluster == 2 && sizeof(T) >= 4)
      go(backward_kernel < T, kNorm, V, P8, sizeof(T) >= 4 ? 2 : 1 >);
    else if (plan.packs == P8)
      go(backward_kernel<T, kNorm, V, P8>);
    else
      go(backward_kernel<T, kNorm, V, 2 * P8>);
  } else if (plan.kind == 4) {
    if constexpr (kRounds<T, kNorm>) {
      // The plan again with grad_weight's type P: it sets that kernel's shared-memory limit (planned for P =
      // T, the same block, shared memory and grid, so the workspace fits).
      const layernorm::BackwardPlan p = layernorm::plan_backward_bulk<T, true, P>(M, N, true);
      if (p.kind != 4 || p.blocks > plan.blocks)
        throw std::logic_error("rmsnorm: backward_v2_bulk_kernel's plan changed with grad_weight's type");
      // a cooperative launch, the split grid barrier (kBulkCopySplitBarrier's); the kernel also adds the
      // partial rows (no sum_partials_kernel)
      launch(layernorm::backward_v2_bulk_kernel<T, V, true, true, P>, dim3(unsigned(p.blocks)), p.block,
             p.smem, stream, {true, false, p.cluster}, dy, x, mean, rstd, w, dx, workspace, dw, db, M, N);
      COURSE_LAUNCH_CHECK();
      return;
    }
  } else if (plan.kind == 3) {
    if constexpr (sizeof(Acc<T>) == 4) {
      launch(bulk_kernel<T, kNorm>(plan.packs), dim3(unsigned(plan.blocks)), plan.block, plan.smem, stream,
             {false, kPdlMain, plan.cluster}, dy, dh, x, mean, rstd, w, dx, workspace, M, N, plan.stages,
             plan.pipe, first_rows(plan.stages));
    }
  } else {
    Acc<T>* sums = workspace + int64_t(kSums<kNorm>) * plan.blocks * N;
    const int64_t per_slice = ceil_div<int64_t>(M, plan.blocks);
    const auto go = [&](auto rows_kernel, auto cols_kernel, int vec) {
      rows_kernel<<<unsigned(M), 1024, 0, stream>>>(dy, x, mean, rstd, w, sums, M, N);
      COURSE_LAUNCH_CHECK();
      const dim3 grid(unsigned(ceil_div(N / vec, 256)), unsigned(plan.blocks));
      cols_kernel<<<grid, 256, 0, stream>>>(dy, dh, x, mean, rstd, w, sums, dx, workspace, M, N, per_slice);
    };
    if (plan.vec)
      go(backward_long_rows_kernel<T, kNorm, V>, backward_long_cols_kernel<T, kNorm, V>, V);
    else
      go(backward_long_rows_kernel<T, kNorm, 1>, backward_long_cols_kernel<T, kNorm, 1>, 1);
  }
  COURSE_LAUNCH_CHECK();
  // 16-byte loads of the partial rows where each row starts on 16 bytes (the workspace does)
  constexpr int kCols = 16 / int(sizeof(Acc<T>));
  const auto add = [&](auto kernel, int cols) {
    launch(kernel, dim3(unsigned(ceil_div(N, 32 * cols)), unsigned(kSums<kNorm>)), dim3(32, 8), 0, stream,
           {false, true}, static_cast<const Acc<T>*>(workspace), plan.partial_rows(), N, dw, db);
  };
  if (N % kCols == 0)
    add(sum_partials_kernel<T, P, kCols>, kCols);
  else
    add(sum_partials_kernel<T, P, 1>, 1);
  COURSE_LAUNCH_CHECK();
}

}  // namespace rmsnorm
