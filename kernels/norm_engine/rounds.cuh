// kernels/norm_engine/rounds.cuh: lesson 03b's backward by bulk copies (backward_v2_bulk_kernel, explained
// in notebooks/03b_layernorm_hopper.ipynb), in the engine because both LayerNorm's kAuto
// (layernorm.hopper.cu) and the engine's RMSNorm (kRms: no mean, no grad_bias, no mean(g) term;
// launch_backward.cuh) run it. It keeps the ladder's name: it is lesson 03's backward v2, by bulk copy.
//
//   finish_column_sums       the end of a one-kernel backward: the K x N column sums from the blocks' partial
//                            rows, in a fixed order, after the grid barrier
//   backward_v2_bulk_kernel  rows by bulk copy into a ring of 4 shared-memory buffers, a cooperative grid
//                            (in clusters of 2 blocks where a block's partial row is large: the pair adds
//                            its sums through distributed shared memory, half the partial rows)
//   RoundsPlan, plan_backward_bulk  its plan (sm_90+, float/half/bf16, rows of at most 1024 16-byte packs)
#pragma once

#include <cooperative_groups.h>

#include "bulk_copy.cuh"  // bulk:: (the Tensor Memory Accelerator's bulk copies and mbarriers)
#include "config.h"
#include "grad.cuh"
#include "occupancy.h"
#include "row.cuh"

namespace norm_engine {

// The end of a one-kernel backward v2: grad_weight and grad_bias from the [2][G][N] partial sums (G rows,
// gridDim.x by default: one per block), split over the blocks of the grid (common.h's add_columns_in_order:
// 2N columns, grad_weight's then grad_bias's, each added over the G rows in a fixed order: the same bits on
// every run, no float atomics). sums = 1: grad_weight's only (RMSNorm). kCols = 4: four columns per 16-byte
// load (N a multiple of 4, partials 16-byte aligned).
template <int kCols = 1, typename acc_t, typename T>
__device__ __forceinline__ void finish_column_sums(const acc_t* partials, int N, T* __restrict__ dw,
                                                   T* __restrict__ db, acc_t* scratch, int sums = 2,
                                                   int G = 0) {
  if (G == 0) G = gridDim.x;
  const auto start = [&](int64_t q) { return q < N ? partials + q : partials + int64_t(G) * N + (q - N); };
  const auto store = [&](int64_t q, acc_t v) {
    if (q < N)
      dw[q] = from_acc<T>(v);
    else
      db[q - N] = from_acc<T>(v);
  };
  add_columns_in_order<kCols>(sums * int64_t(N), blockIdx.x, gridDim.x, G, N, start, store, scratch);
}

// ------------------------------------------------------------------------------------------------
// Backward v2, bulk copy (sm_90+)
// ------------------------------------------------------------------------------------------------

// The rows, blocks and column sums of the cooperative kernel, but the rows arrive by the Tensor Memory
// Accelerator's bulk copy (cp.async.bulk) into a ring of 4 shared-memory buffers, one round of the
// block's R rows (x and grad_y, R * N contiguous values each, 16 KB apiece at 4096 bf16 columns) per
// buffer, while the threads work on an earlier round. Why: in the register loop every thread has one row
// in flight, and ptxas counts all of a thread's global loads on one scoreboard, so a thread waiting for
// row k also waits for any later row it has already asked for (the SASS shows it; two rows in flight made
// bf16 slower). A bulk copy is one instruction per round, counted by its own mbarrier (a shared-memory
// counter of bytes still to arrive), so up to three rounds are in flight per SM whatever the threads are
// doing. One thread issues the copies; lanes 0..R-1 of warp 0 fetch the rows' mean and rstd with
// cp.async, which arrives on the same mbarrier. x and grad_y are read from shared memory in both passes,
// and the column sums live in registers; the end is the cooperative kernel's (a partial row per block, a
// grid barrier, fixed-order sums), with the partial row added from the groups' registers.

constexpr int kBulkBuffers = 4;  // rounds in flight: 3 (3 and 6 buffers were slower)

// The column sums at the end: four float columns per 16-byte load (add_columns_in_order's kCols); the ring,
// their scratch, holds far more than four floats per thread.
constexpr int kBulkSumCols = 4;

// Shared memory of backward_v2_bulk_kernel: [reduction buffers | mbarriers | mean, rstd | row buffers].
template <typename T>
struct BulkLayout {
  int R, N;
  bool early = false;  // kEarly: room to add the groups' column sums while a round is still in the ring
  int cluster = 1;     // clusters of this many blocks: kEarly needs room for the block's [2][N] column sums
  __host__ __device__ size_t stage_bytes() const { return 2 * size_t(R) * N * sizeof(T); }  // x, grad_y
  __host__ __device__ size_t bars() const { return 2 * 32 * 2 * sizeof(Acc<T>); }
  __host__ __device__ size_t stats() const { return bars() + 8 * size_t(kBulkBuffers); }
  __host__ __device__ size_t buffers() const {
    return ceil_div<size_t>(stats() + 2 * size_t(kBulkBuffers) * R * 4, 128) * 128;
  }
  __host__ __device__ size_t total() const {
    const size_t ring = size_t(kBulkBuffers) * stage_bytes();
    const size_t ending = 2 * size_t(R) * N * sizeof(Acc<T>);  // the groups' column sums, at the end
    return buffers() + (ring > ending ? ring : ending);
  }
  // kEarly: [max(R - 1, 1 if clustered)][2][N] column sums
  __host__ __device__ size_t exchange() const { return total(); }
  __host__ __device__ size_t total_bytes() const {
    const size_t slots = R > 1 ? R - 1 : (cluster > 1 ? 1 : 0);
    return total() + (early ? 2 * slots * N * sizeof(Acc<T>) : 0);
  }
};

// kEarly (kBulkCopySplitBarrier): the last round peeled: its column sums are added and the block's
// partial row written first, the grid barrier is arrived at, and the round's grad_x is computed while the
// other blocks arrive. (Weight is then also loaded before the first bulk copies are issued rather than
// after: measured neutral.) kRms (lesson 05's RMSNorm): mean 0 (not read), no mean(g) term, no grad_bias
// (db unused, partials [1][G][N]); P: grad_weight's type (float for bf16 inputs with a float weight).
template <typename T, int kVec, bool kEarly = false, bool kRms = false, typename P = T>
__global__ __launch_bounds__(1024) void backward_v2_bulk_kernel(
    const T* __restrict__ dy, const T* __restrict__ x, const Acc<T>* __restrict__ mean,
    const Acc<T>* __restrict__ rstd, const T* __restrict__ w, T* __restrict__ dx,
    Acc<T>* __restrict__ partials, P* __restrict__ dw, P* __restrict__ db, int64_t M, int N) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using acc_t = Acc<T>;
  static_assert(sizeof(acc_t) == 4, "float, half and bf16 only");
  constexpr int B = kBulkBuffers;
  extern __shared__ float4 smem_[];
  char* base = reinterpret_cast<char*>(smem_);
  const int R = blockDim.y, packs = N / kVec, c = threadIdx.x;
  const unsigned C = cooperative_groups::this_cluster().num_blocks();  // blocks per cluster (1: none)
  const BulkLayout<T> L{R, N, kEarly};
  acc_t* red = reinterpret_cast<acc_t*>(base);  // [2][32 warps][2]
  uint64_t* bars = reinterpret_cast<uint64_t*>(base + L.bars());
  float* stats = reinterpret_cast<float*>(base + L.stats());  // [buffer][mean R | rstd R]
  char* buffers = base + L.buffers();
  const int64_t step = int64_t(gridDim.x) * R;
  const int64_t rounds = ceil_div<int64_t>(M, step);
  const bool warp0 = threadIdx.y == 0 && threadIdx.x < 32;  // R <= 32: a block has at most 32 warps

  // Round k of this block: rows first .. first + R - 1 (those below M), into buffer s = k % B.
  const auto fetch = [&](int64_t k, int s) {
    const int64_t first = blockIdx.x * int64_t(R) + k * step;
    const int valid = int(M - first < 0 ? 0 : (M - first < R ? M - first : R));
    const uint32_t bytes = uint32_t(valid) * uint32_t(N) * sizeof(T);
    char* buf = buffers + s * L.stage_bytes();
    if (threadIdx.x == 0) {
      bulk::arrive_expect(&bars[s], 2 * bytes);
      if (bytes) {
        bulk::copy(buf, x + first * N, bytes, &bars[s]);
        bulk::copy(buf + L.stage_bytes() / 2, dy + first * N, bytes, &bars[s]);
      }
    }
    if (threadIdx.x < R) {
      if (threadIdx.x < valid) {
        if constexpr (!kRms) bulk::copy4(stats + s * 2 * R + threadIdx.x, mean + first + threadIdx.x);
        bulk::copy4(stats + s * 2 * R + R + threadIdx.x, rstd + first + threadIdx.x);
        bulk::arrive_after_copies(&bars[s]);
      } else {
        bulk::arrive(&bars[s]);
      }
    }
  };
  Raw<T, kVec> wv;
  if (kEarly && c < packs) wv.load(w + c * kVec);
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    for (int s = 0; s < B; ++s) bulk::init(&bars[s], 1 + R);  // thread 0's and lanes 0..R-1's arrivals
    bulk::fence_init();
  }
  __syncthreads();
  if (warp0)
    for (int k = 0; k < rounds && k < B; ++k) fetch(k, k);

  if (!kEarly && c < packs) wv.load(w + c * kVec);
  acc_t aw[kVec] = {}, ab[kVec] = {};
  const acc_t inv_n = acc_t(1) / N;
  const bool one_warp_rows = blockDim.x == 32;  // then group_sum has no __syncthreads of its own
  int s = 0;
  uint32_t parity = 0;  // of buffer s's mbarrier phase: flips each time round k wraps around the ring
  for (int64_t k = 0; k < (kEarly ? rounds - 1 : rounds); ++k) {
    bulk::wait(&bars[s], parity);
    const int64_t row = blockIdx.x * int64_t(R) + k * step + threadIdx.y;
    const T* xs = reinterpret_cast<const T*>(buffers + s * L.stage_bytes()) + threadIdx.y * N + c * kVec;
    const T* gs = xs + R * N;
    // x and grad_y are read from shared memory in both passes (held in registers they would spill).
    acc_t mu = 0, rs = 0, sums[2] = {0, 0};  // sum of g, sum of g * xhat
    if (row < M && c < packs) {
      Raw<T, kVec> xv, gv;
      xv.load(xs);
      gv.load(gs);
      if constexpr (!kRms) mu = stats[s * 2 * R + threadIdx.y];
      rs = stats[s * 2 * R + R + threadIdx.y];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t g = gv[j] * wv[j];
        if constexpr (!kRms) sums[0] += g;
        sums[1] += g * (xv[j] - mu) * rs;
      }
    }
    group_sum(sums, red + (k & 1) * 64);
    if (one_warp_rows) __syncthreads();
    // Every thread is done with the previous round's buffer (both passes): refill it.
    if (warp0 && k >= 1 && k - 1 + B < rounds) fetch(k - 1 + B, s == 0 ? B - 1 : s - 1);
    if (row < M && c < packs) {
      Raw<T, kVec> xv, gv;
      xv.load(xs);
      gv.load(gs);
      const acc_t mg = kRms ? acc_t(0) : sums[0] * inv_n, mgx = sums[1] * inv_n;
      acc_t out[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t d = gv[j], xh = (xv[j] - mu) * rs;
        out[j] = grad_x(rs, d * wv[j], mg, xh, mgx);
        aw[j] += d * xh;
        if constexpr (!kRms) ab[j] += d;
      }
      reinterpret_cast<Pack<T, kVec>*>(dx + row * N)[c] = to_pack<T>(out);
    }
    if (++s == B) s = 0, parity ^= 1;
  }
  static_assert(kVec % 4 == 0, "whole float4s of column sums");
  const auto put4 = [](float4* to, const acc_t* v) { *to = make_float4(v[0], v[1], v[2], v[3]); };
  const auto add4 = [](acc_t* v, float4 a) { v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w; };
  // Group 0 adds the other groups' column sums (left in `from` as [R - 1][2][N]) to its own in group
  // order and writes the block's row of partial sums, all in 16-byte accesses. In a cluster of C > 1
  // blocks, group 0 leaves the block's sums in `from`'s first [2][N] instead (each thread over the columns
  // it has just read), and after the cluster's barrier block `rank` adds slice `rank` of the columns over
  // the C blocks' shared memory, in rank order, and writes it to the cluster's partial row: G / C rows.
  const auto write_row = [&](acc_t* from) {
    if (threadIdx.y == 0 && c < packs) {
      for (int r = 1; r < R; ++r) {
        const float4* f = reinterpret_cast<const float4*>(from + (r - 1) * 2 * N + c * kVec);
#pragma unroll
        for (int j = 0; j < kVec; j += 4) {
          add4(aw + j, f[j / 4]);
          if constexpr (!kRms) add4(ab + j, f[(N + j) / 4]);
        }
      }
      const bool own = C == 1;  // else the block's sums go to shared memory, the cluster writes the row
      float4* pw = reinterpret_cast<float4*>((own ? partials + blockIdx.x * int64_t(N) : from) + c * kVec);
      float4* pb = reinterpret_cast<float4*>(
          (own ? partials + (gridDim.x + blockIdx.x) * int64_t(N) : from + N) + c * kVec);
#pragma unroll
      for (int j = 0; j < kVec; j += 4) {
        put4(pw + j / 4, aw + j);
        if constexpr (!kRms) put4(pb + j / 4, ab + j);
      }
    }
    if (C > 1) {
      auto cluster = cooperative_groups::this_cluster();
      cluster.sync();  // every block's sums are in its shared memory
      const unsigned rank = cluster.block_rank();
      const int64_t G = gridDim.x / C, row = blockIdx.x / C;
      const int quads = (kRms ? 1 : 2) * N / 4, q0 = int(rank * quads / C), q1 = int((rank + 1) * quads / C);
      for (int i = q0 + threadIdx.y * blockDim.x + c; i < q1; i += blockDim.x * blockDim.y) {
        acc_t sum[4] = {0, 0, 0, 0};
        for (unsigned b = 0; b < C; ++b)
          add4(sum, cluster.map_shared_rank(reinterpret_cast<float4*>(from), b)[i]);
        const int q = 4 * i;  // column q of grad_weight's N, then grad_bias's
        put4(reinterpret_cast<float4*>(q < N ? partials + row * N + q : partials + (G + row) * N + (q - N)),
             sum);
      }
      // No second cluster barrier: a block reads the others' shared memory before it arrives at the grid
      // barrier, and none leaves or reuses `from` before every block has arrived there.
    }
  };
  const auto leave_sums = [&](acc_t* to) {  // groups 1..R-1
    if (threadIdx.y > 0 && c < packs) {
      float4* t = reinterpret_cast<float4*>(to + (threadIdx.y - 1) * 2 * N + c * kVec);
#pragma unroll
      for (int j = 0; j < kVec; j += 4) {
        put4(t + j / 4, aw + j);
        if constexpr (!kRms) put4(t + (N + j) / 4, ab + j);
      }
    }
  };
  acc_t* acc = reinterpret_cast<acc_t*>(buffers);  // the ring, free once every round is done
  if constexpr (kEarly) {
    // The last round, peeled: its column sums first, then the block's partial row (the groups' sums meet
    // in a region of their own, the round still being in the ring), the arrival at the grid barrier, and
    // only then the round's grad_x, which the barrier's latency hides.
    const int64_t k = rounds - 1;
    bulk::wait(&bars[s], parity);
    const int64_t row = blockIdx.x * int64_t(R) + k * step + threadIdx.y;
    const T* xs = reinterpret_cast<const T*>(buffers + s * L.stage_bytes()) + threadIdx.y * N + c * kVec;
    const bool live = row < M && c < packs;
    acc_t mu = 0, rs = 0, sums[2] = {0, 0};
    if (live) {
      Raw<T, kVec> xv, gv;
      xv.load(xs);
      gv.load(xs + R * N);
      if constexpr (!kRms) mu = stats[s * 2 * R + threadIdx.y];
      rs = stats[s * 2 * R + R + threadIdx.y];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t d = gv[j], g = d * wv[j], xh = (xv[j] - mu) * rs;
        if constexpr (!kRms) sums[0] += g;
        sums[1] += g * (xv[j] - mu) * rs;
        aw[j] += d * xh;
        if constexpr (!kRms) ab[j] += d;
      }
    }
    acc_t* xch = reinterpret_cast<acc_t*>(base + L.exchange());
    leave_sums(xch);
    group_sum(sums, red + (k & 1) * 64);
    if (one_warp_rows) __syncthreads();
    write_row(xch);
    auto grid = cooperative_groups::this_grid();
#if __CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 2)
    auto token = grid.barrier_arrive();  // the split grid barrier (cooperative_groups, CUDA 12.2+)
#endif
    if (live) {  // x and grad_y again from the ring (held in registers across the exchange they would spill)
      Raw<T, kVec> xv, gv;
      xv.load(xs);
      gv.load(xs + R * N);
      const acc_t mg = kRms ? acc_t(0) : sums[0] * inv_n, mgx = sums[1] * inv_n;
      acc_t out[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t d = gv[j], xh = (xv[j] - mu) * rs;
        out[j] = grad_x(rs, d * wv[j], mg, xh, mgx);
      }
      reinterpret_cast<Pack<T, kVec>*>(dx + row * N)[c] = to_pack<T>(out);
    }
#if __CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 2)
    grid.barrier_wait(std::move(token));
#else
    grid.sync();  // older toolkits: the same result, without the overlap
#endif
  } else {
    // The block's partial row: groups 1..R-1 leave their column sums in shared memory (the ring is free
    // now), group 0 adds them to its own in group order and writes the row. Thread c's kVec columns are
    // contiguous, so one float at a time would hit each bank kVec / 4 times over per warp (8-way for
    // bf16); whole float4s (put4, add4) do not.
    if (R > 1 || C > 1) __syncthreads();  // (a cluster's row: group 0 writes the ring's start)
    if (R > 1) {
      leave_sums(acc);
      __syncthreads();
    }
    write_row(acc);
    cooperative_groups::this_grid().sync();
  }
  finish_column_sums<kBulkSumCols>(partials, N, dw, db, acc, kRms ? 1 : 2,
                                   int(gridDim.x / C));  // N % 4 == 0: whole packs
#else
  __trap();  // never launched: the host checks that this kernel was built for sm_90 or newer
#endif
}

// backward_v2_bulk_kernel (sm_90+, float/half/bf16, one 16-byte pack of the row per thread, so rows up to
// 8192 bf16 or 4096 floats, in R = 1024 / threads groups). No plan (blocks 0) elsewhere. kRms, P: the
// kernel's (RMSNorm, grad_weight's type).
// How backward_v2_bulk_kernel runs: its block (threads per row x rows per round), grid, dynamic shared memory
// and cluster; blocks == 0: it does not apply.
struct RoundsPlan {
  dim3 block;
  int blocks = 0;  // a cooperative grid of equal rounds, whole clusters
  size_t smem = 0;
  int cluster = 1;     // blocks per thread block cluster (1: none); blocks / cluster partial rows
  bool early = false;  // the last round arrives at the grid barrier before its grad_x
};

template <typename T, bool kRms = false, typename P = T>
RoundsPlan plan_backward_bulk(int64_t M, int N, bool early) {
  RoundsPlan plan;
  constexpr int V = kPack16<T>;
  if constexpr (sizeof(T) <= 4) {
    if (device_attribute<cudaDevAttrComputeCapabilityMajor>() < 9 ||
        device_attribute<cudaDevAttrCooperativeLaunch>() == 0)
      return plan;
    auto kernel =
        early ? backward_v2_bulk_kernel<T, V, true, kRms, P> : backward_v2_bulk_kernel<T, V, false, kRms, P>;
    const void* fn = reinterpret_cast<const void*>(kernel);
    if (ptx_version(fn) < 90) return plan;  // built for an older GPU (its body is a trap)
    const int threads = row_threads(N / V, 1);
    if (threads == 0) return plan;
    const int64_t rows = 1024 / threads < M ? 1024 / threads : M;
    const size_t smem = BulkLayout<T>{int(rows), N, early}.total_bytes();
    if (smem > size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>())) return plan;
    const int per_sm = blocks_per_sm(fn, threads * int(rows), smem);
    if (per_sm == 0) return plan;
    const int64_t want = ceil_div<int64_t>(M, rows), cap = int64_t(per_sm) * num_sms();
    const int64_t blocks = want < cap ? want : cap;
    const int64_t rounds = ceil_div<int64_t>(M, rows * blocks);  // as few blocks as give equal rounds
    plan.blocks = int(ceil_div<int64_t>(M, rows * rounds));
    plan.block = dim3(threads, unsigned(rows));
    plan.smem = smem;
    // Clusters of C blocks where a block's partial row is large (what they save), the grid has a few of
    // them, and every cluster fits at once (a cooperative grid), with the grid rounded up to whole clusters:
    // the same rounds, the extra blocks' rows beyond M.
    constexpr int C = kBackward.rounds_cluster;
    const size_t row_bytes = (kRms ? 1 : 2) * size_t(N) * sizeof(Acc<T>);
    if (C > 1 && row_bytes >= kBackward.rounds_cluster_from && plan.blocks >= 4 * C) {
      const size_t smem_c = BulkLayout<T>{int(rows), N, early, C}.total_bytes();
      const int64_t blocks_c = ceil_div<int64_t>(plan.blocks, C) * C;
      if (smem_c <= size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) &&
          blocks_c <= int64_t(active_clusters(fn, threads * int(rows), smem_c, C)) * C) {
        plan.blocks = int(blocks_c);
        plan.smem = smem_c;
        plan.cluster = C;
      }
    }
    plan.early = early;
  }
  return plan;
}

}  // namespace norm_engine
