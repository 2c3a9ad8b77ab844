// kernels/norm_engine/backward.cuh: the engine's backward kernels, RMSNorm and LayerNorm (Norm), with or
// without the fused add's grad_h. Which one runs for a shape: engine.cuh's table (launch_backward.cuh).
//
//   backward_kernel            persistent row groups, rows in registers with the next one in flight, the
//                              column sums per block in shared memory (lesson 03's backward v2); over a
//                              cluster of 2 (sm_90) for rows one block cannot hold
//   backward_long_rows_kernel, backward_long_cols_kernel: rows too long for registers without sm_90: the row
//                              sums by one block per row, then grad_x and the column sums by column tiles
//   backward_bulk_kernel       sm_90: clusters of 1-8 blocks per row, slices by bulk copy into a ring of
//                              stages, x and grad_y read once (3 M N against the long pair's 5 M N)
//   sum_partials_kernel        the partial rows added in a fixed order (the same bits on every run), with PDL
#pragma once

#include "config.h"
#include "exchange.cuh"
#include "grad.cuh"

namespace norm_engine {

template <typename T, int kVec, int kPacks>
struct Row {  // this thread's share of one row of x (or h) and grad_y, and the row's mean and rstd
  Raw<T, kVec> x[kPacks], g[kPacks];
  Acc<T> mean = 0, rstd = 0;
};

// Whether backward_kernel loads the next row before this row's math: two rows of x and grad_y in registers.
// Not for 4-byte types at 16 values per thread: two such rows need 64 registers, all a thread of a
// 1024-thread block has, and spill (kBackward.no_prefetch_from).
template <typename T, int kValues>
constexpr bool kPrefetch = !(sizeof(T) >= 4 && kValues >= kBackward.no_prefetch_from);

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
            out[k0 + k] = grad_x(cur.rstd, d * wv[k0 + k], mg, xh, mgx);
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
      out[k] = grad_x(rs, gv[k] * wv[k], mg, xh, mgx);
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
  __shared__ acc_t red[2][32 * K];                             // group_sum's, by parity
  constexpr int X = 4;                                         // rows of the cluster's exchange in flight
  __shared__ acc_t slots[X][8][K];                             // the cluster's blocks' row sums, by rank
  __shared__ alignas(8) uint64_t bars[kBackward.bulk_stages];  // one mbarrier per stage
  __shared__ alignas(8) uint64_t xbars[X];                     // one per exchange slot (deliver_sums)
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int C = int(cluster.num_blocks()), n = N / C, col0 = int(cluster.block_rank()) * n;
  const int64_t G = gridDim.x / C, first = blockIdx.x / C;
  const int64_t rows = first < M ? (M - first + G - 1) / G : 0;  // this cluster's
  const T *x = x_ + col0, *dy = dy_ + col0, *w = w_ + col0, *dh = dh_ ? dh_ + col0 : nullptr;
  T* dx = dx_ + col0;
  // stage s of the ring: x's slice [n], then grad_y's [n]
  T* ring = reinterpret_cast<T*>(bulk_smem_);
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
          out[j] = grad_x_prescaled(rs, d * wv[p][j], mg, xh, mgx);
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
  __syncthreads();
  // The block's slice of the cluster's partial row(s), through the ring (free now): thread c's kVec columns
  // are adjacent, so its float4 stores straight from registers left every other 32-byte sector of a warp's
  // store half written (Nsight Compute: 9 % of the kernel's sectors excessive); from shared memory each warp
  // writes 512 contiguous bytes.
  acc_t* cs = reinterpret_cast<acc_t*>(bulk_smem_);  // [K][n]
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
// its launch hides behind that kernel's end (1.4-1.8 us of a 57 us bfloat16 backward of 512 x 32768). One
// thread per column walking all G rows four loads at a time instead takes G / 4 rounds of L2 latency: slow
// where G is large (backward_kernel's grids; float32 2048 x 8192 81 % of a copy against 87 %). P is T, or
// float for float32 parameters beside a half/bf16 x.
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

}  // namespace norm_engine
