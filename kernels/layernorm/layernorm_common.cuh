// kernels/layernorm/layernorm_common.cuh: the pieces lesson 03's forward v3 and backward v2 are built from,
// shared by the ladder (kernels/layernorm/layernorm.cu) and the tuned kernels that reuse them
// (kernels/layernorm/layernorm.hopper.cu). No torch header: included by .cu files only. The primitives it
// builds on are the norm engine's, shared with lesson 05: norm_engine/row.cuh (Raw, to_pack, lane_sum,
// group_sum), grad.cuh (grad_x) and occupancy.h (row_threads, vectorizable, blocks_per_sm, active_clusters,
// ptx_version).
//
//   load_row, normalize_row forward v3 for one row: the row into registers, then mean, rstd and y
//   Row, backward_v2_rows   backward v2's loop over a block's rows (grad_x, and the column sums of
//                           grad_weight and grad_bias in shared memory), ending in the block's partial row
//   BackwardRun, BackwardPlan, plan_backward_rows: which backward kernel, and its sizes
//   forward_v3_pipelined, plan_backward_tuned, launch_backward_tuned: what layernorm.cu's launchers call in
//                           layernorm.hopper.cu
#pragma once

#include <initializer_list>
#include <mutex>
#include <type_traits>
#include <vector>

#include "layernorm.h"
#include "norm_engine/grad.cuh"
#include "norm_engine/occupancy.h"
#include "norm_engine/row.cuh"

namespace layernorm {

using norm_engine::active_clusters;
using norm_engine::blocks_per_sm;
using norm_engine::grad_x;
using norm_engine::group_sum;
using norm_engine::lane_sum;
using norm_engine::ptx_version;
using norm_engine::Raw;
using norm_engine::row_threads;
using norm_engine::rsqrt_acc;
using norm_engine::to_pack;
using norm_engine::vectorizable;

// Bytes of the row each thread holds in registers. 2-byte types take half: the same number of values
// per thread as float (16 forward, 8 of x and 8 of grad_y backward), so the same registers, arithmetic
// and conversions per thread and twice the threads per row, rather than twice the work per thread for
// the same bytes (measured slower). Rows too long for that fall back
// to the full width.
constexpr int kFwdBytes = 64;  // forward v3
constexpr int kBwdBytes = 32;  // backward v2: of x, and of grad_y, per row
constexpr int kBigThreads = 512;

// Loads of forward v3: this thread's kPacks Packs of kVec values of a row from `src` (global or shared
// memory; pack c goes to thread c % blockDim.x: each warp-wide access is 512 contiguous bytes), and their
// sum. A group whose row does not exist (`active` false) loads nothing.
template <typename T, int kVec, int kPacks>
__device__ __forceinline__ Acc<T> load_row(Raw<T, kVec> (&v)[kPacks], const T* src, int N, bool active) {
  Acc<T> sum = 0;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int j = (threadIdx.x + p * blockDim.x) * kVec;  // first column of pack p
    if (active && j < N) {
      v[p].load(src + j);
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum += v[p][k];
    }
  }
  return sum;
}

// The rest of forward v3 for a row in registers (v, and its sum over this thread's values): the mean and
// the mean of squared deviations over the row group (two passes over the registers), then y, mean and
// rstd. Every thread of the block calls it (group_sum synchronizes the block); a group whose row does not
// exist (`active` false) writes nothing.
template <typename T, int kVec, int kPacks>
__device__ __forceinline__ void normalize_row(const Raw<T, kVec> (&v)[kPacks], Acc<T> sum,
                                              const T* __restrict__ w, const T* __restrict__ b,
                                              T* __restrict__ y, Acc<T>* __restrict__ mean,
                                              Acc<T>* __restrict__ rstd, int64_t row, int N, Acc<T> eps,
                                              bool active, Acc<T> (&buf)[2][32]) {
  using acc_t = Acc<T>;
  acc_t s[1] = {sum};
  group_sum(s, buf[0]);
  const acc_t mu = s[0] / N;
  acc_t q[1] = {0};
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    if (active && (threadIdx.x + p * blockDim.x) * kVec < N) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) q[0] += (v[p][k] - mu) * (v[p][k] - mu);
    }
  }
  group_sum(q, buf[1]);
  const acc_t rs = rsqrt_acc(q[0] / N + eps);
  if (!active) return;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int j = (threadIdx.x + p * blockDim.x) * kVec;
    if (j < N) {
      Raw<T, kVec> wv, bv;
      wv.load(w + j);
      bv.load(b + j);
      acc_t out[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) out[k] = (v[p][k] - mu) * rs * wv[k] + bv[k];
      *reinterpret_cast<Pack<T, kVec>*>(y + row * N + j) = to_pack<T>(out);
    }
  }
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// This block's row of the [2][gridDim.x][N] partial sums: the column sums of its blockDim.y row groups,
// acc = [group][grad_weight's N | grad_bias's N] in shared memory, added in group order 0, 1, ...
template <typename acc_t>
__device__ __forceinline__ void write_partial_row(const acc_t* acc, int N, acc_t* __restrict__ partials) {
  const int R = blockDim.y;
  for (int j = threadIdx.y * blockDim.x + threadIdx.x; j < N; j += blockDim.x * R) {
    acc_t sw = 0, sb = 0;
    for (int r = 0; r < R; ++r) {
      sw += acc[r * 2 * N + j];
      sb += acc[r * 2 * N + N + j];
    }
    partials[blockIdx.x * int64_t(N) + j] = sw;
    partials[(gridDim.x + blockIdx.x) * int64_t(N) + j] = sb;
  }
}

template <typename T, int kVec, int kPacks>
struct Row {  // this thread's share of one row of x and grad_y, plus that row's mean and rstd
  Raw<T, kVec> x[kPacks], g[kPacks];
  Acc<T> mean = 0, rstd = 0;
  __device__ __forceinline__ void load(const T* __restrict__ x_, const T* __restrict__ dy,
                                       const Acc<T>* __restrict__ mean_, const Acc<T>* __restrict__ rstd_,
                                       int64_t row, int N) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int c = threadIdx.x + p * blockDim.x;
      if (c * kVec < N) {
        x[p].load(x_ + row * N + c * kVec);
        g[p].load(dy + row * N + c * kVec);
      }
    }
    mean = mean_[row];
    rstd = rstd_[row];
  }
};

// backward v2's loop for one block (its kernels, layernorm.cu's backward_v2_kernel and layernorm.hopper.cu's
// backward_v2_cooperative_kernel, differ only in what follows): persistent row groups. Block b, group r
// takes rows b*R + r, then + gridDim.x * R, ...; the loads of the next row are issued before the current
// row's math, so memory stays busy through the reductions. Shared memory: two reduction buffers, then per
// group [grad_weight sums | grad_bias sums] (N each), each column owned by the thread that owns it in the
// row: no conflicts, no atomics. Ends with the block's row of partial sums written; returns the shared
// memory the column sums used (free again), for the caller's scratch. Lesson 03's version, spelled out on
// purpose: norm_engine/backward.cuh's backward_kernel repeats its set-up, generalized to clusters and
// RMSNorm.
template <typename T, int kVec, int kPacks>
__device__ __forceinline__ Acc<T>* backward_v2_rows(const T* __restrict__ dy, const T* __restrict__ x,
                                                    const Acc<T>* __restrict__ mean,
                                                    const Acc<T>* __restrict__ rstd, const T* __restrict__ w,
                                                    T* __restrict__ dx, Acc<T>* __restrict__ partials,
                                                    int64_t M, int N) {
  using acc_t = Acc<T>;
  using P = Pack<T, kVec>;
  constexpr int C = kVec * sizeof(acc_t) >= 16 ? 16 / int(sizeof(acc_t)) : kVec;  // acc values per access
  using A = Pack<acc_t, C>;
  extern __shared__ float4 smem_[];
  acc_t* red = reinterpret_cast<acc_t*>(smem_);  // [2][32 warps][2]
  acc_t* acc_w = red + 2 * 32 * 2 + threadIdx.y * 2 * N;
  acc_t* acc_b = acc_w + N;
  const int packs = N / kVec, R = blockDim.y;
  const acc_t inv_n = acc_t(1) / N;

  // f(p, c) for each pack p of this thread's share of a row: column pack c, if the row has it.
  const auto each_pack = [&](auto&& f) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int c = threadIdx.x + p * blockDim.x;
      if (c < packs) f(p, c);
    }
  };
  // weight is read again for every row (L1 hits), which leaves the registers to x and grad_y.
  each_pack([&](int, int c) {
#pragma unroll
    for (int k = 0; k < kVec; k += C) {
      reinterpret_cast<A*>(acc_w + c * kVec + k)[0] = A{};
      reinterpret_cast<A*>(acc_b + c * kVec + k)[0] = A{};
    }
  });

  const int64_t step = int64_t(gridDim.x) * R;
  int64_t row = blockIdx.x * int64_t(R) + threadIdx.y;
  // One row: its two sums over the group, then grad_x and this group's column sums. `cur` holds the
  // row's x and grad_y; the whole block calls it together (group_sum synchronizes the block).
  const auto process = [&](const Row<T, kVec, kPacks>& cur, int64_t row, int parity) {
    acc_t s[2] = {0, 0};  // sum of g, sum of g * xhat
    if (row < M) {
      each_pack([&](int p, int c) {
        Raw<T, kVec> wv;
        wv.load(w + c * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const acc_t g = cur.g[p][k] * wv[k];
          s[0] += g;
          s[1] += g * (cur.x[p][k] - cur.mean) * cur.rstd;
        }
      });
    }
    group_sum(s, red + parity * 64);
    if (row < M) {
      const acc_t mg = s[0] * inv_n, mgx = s[1] * inv_n;
      P* dxr = reinterpret_cast<P*>(dx + row * N);
      each_pack([&](int p, int c) {
        Raw<T, kVec> wv;
        wv.load(w + c * kVec);
        acc_t out[kVec];
#pragma unroll
        for (int k0 = 0; k0 < kVec; k0 += C) {
          A aw = reinterpret_cast<A*>(acc_w + c * kVec + k0)[0];
          A ab = reinterpret_cast<A*>(acc_b + c * kVec + k0)[0];
#pragma unroll
          for (int k = 0; k < C; ++k) {
            const acc_t dyv = cur.g[p][k0 + k];
            const acc_t xh = (cur.x[p][k0 + k] - cur.mean) * cur.rstd;
            const acc_t g = dyv * wv[k0 + k];
            out[k0 + k] = grad_x(cur.rstd, g, mg, xh, mgx);
            aw.v[k] += dyv * xh;
            ab.v[k] += dyv;
          }
          reinterpret_cast<A*>(acc_w + c * kVec + k0)[0] = aw;
          reinterpret_cast<A*>(acc_b + c * kVec + k0)[0] = ab;
        }
        dxr[c] = to_pack<T>(out);
      });
    }
  };
  if constexpr (sizeof(T) == 4) {
    // Two rows in registers, used in turn (no copy of one into the other): the load of row + 2 * step
    // is issued as soon as `a` is done, before waiting for `b`, so two rows of each group are in
    // flight while one is waited for. (Moving a just-loaded row from one variable to another, as the
    // loop below does, makes the thread wait for that load before it can issue the next one.) float
    // only: a 2-byte row holds half the bytes, and two of them in flight did not pay for the registers
    // (measured).
    Row<T, kVec, kPacks> a, b;
    if (row < M) a.load(x, dy, mean, rstd, row, N);
    for (int64_t first = blockIdx.x * int64_t(R); first < M; first += 2 * step, row += 2 * step) {
      if (row + step < M) b.load(x, dy, mean, rstd, row + step, N);
      process(a, row, 0);
      if (first + step >= M) break;  // the same for the whole block
      if (row + 2 * step < M) a.load(x, dy, mean, rstd, row + 2 * step, N);
      process(b, row + step, 1);
    }
  } else {
    Row<T, kVec, kPacks> cur;  // the row computed now; `next` is loaded before its math
    if (row < M) cur.load(x, dy, mean, rstd, row, N);
    int parity = 0;
    for (int64_t first = blockIdx.x * int64_t(R); first < M; first += step, row += step, parity ^= 1) {
      Row<T, kVec, kPacks> next;
      if (row + step < M) next.load(x, dy, mean, rstd, row + step, N);
      process(cur, row, parity);
      cur = next;
    }
  }
  __syncthreads();
  acc_t* acc = red + 2 * 32 * 2;
  write_partial_row(acc, N, partials);
  return acc;
}

// ------------------------------------------------------------------------------------------------
// Planning: which kernel, how many threads per row, how many rows per block and blocks in all.
// ------------------------------------------------------------------------------------------------

// Which kernel backward v2 runs.
enum class BackwardRun {
  kNone,        // no plan (a planner's "does not apply")
  kRows,        // rows in registers, 16-byte packs (backward_v2_kernel, or the cooperative one if `fuse`)
  kScalarRows,  // the same, one value per pack
  kLongRows,    // rows too long for registers: backward_v2_long_dx_kernel, then column_partials_kernel
  kBulkRounds,  // rows by bulk copy (backward_v2_bulk_kernel, norm_engine/rounds.cuh)
};

// How backward v2 runs: which kernel (`run`), its block and grid, and its dynamic shared memory. The grid
// size is also the number of rows of partial sums (the workspace is 2 * blocks * N values).
struct BackwardPlan {
  BackwardRun run = BackwardRun::kNone;
  int packs = 0;       // kRows: packs of x (and of grad_y) per thread
  bool fuse = false;   // the column sums finished in the kernel (a cooperative launch), no second kernel
  bool early = false;  // kBulkRounds: the last round arrives at the grid barrier before its grad_x
  int cluster = 1;  // kBulkRounds: blocks per thread block cluster (1: none); blocks / cluster partial rows
  dim3 block;
  int blocks = 0;  // grid size, = rows of partial sums
  size_t smem = 0;
};

// A plan for `kernel`, a backward_v2_rows kernel with kVec values per pack and kPacks packs per thread:
// row groups of whole warps, as many per block as fit in 1024 threads and in shared memory, and about one
// block per SM (a persistent grid). `fuse`: the kernel finishes the column sums itself, so the grid is
// sized to equal rounds (every block does the same number of rows: no last round with a few blocks left
// running, e.g. 4096 rows in pairs: 128 blocks x 16 rounds, not 132 x 15.5) and the shared memory must
// also hold finish_column_sums' scratch.
template <typename T, int kVec, int kPacks, typename Kernel>
BackwardPlan plan_backward_rows(Kernel kernel, BackwardRun run, int64_t M, int N, bool fuse) {
  using acc_t = Acc<T>;
  BackwardPlan plan;
  const int threads = row_threads(N / kVec, kPacks);
  if (threads == 0) return plan;
  const size_t fixed = 2 * 32 * 2 * sizeof(acc_t), per_row = 2 * size_t(N) * sizeof(acc_t);
  const int64_t fit =
      (int64_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) - int64_t(fixed)) /
      int64_t(per_row);
  int64_t rows = 1024 / threads;  // a block of up to 1024 threads: one row of partial sums per ~SM
  rows = rows < fit ? rows : fit;
  rows = rows < M ? rows : M;
  if (rows < 1) return plan;
  plan.block = dim3(threads, unsigned(rows));
  plan.smem = fixed + rows * per_row;
  if (fuse) {  // the column sums reuse the row sums' space: at least one value per thread
    const size_t scratch = fixed + size_t(threads) * rows * sizeof(acc_t);
    plan.smem = plan.smem > scratch ? plan.smem : scratch;
  }
  const int per_sm = blocks_per_sm(reinterpret_cast<const void*>(kernel), threads * int(rows), plan.smem);
  if (per_sm == 0) return plan;
  const int64_t want = ceil_div<int64_t>(M, rows), cap = int64_t(per_sm) * num_sms();
  plan.blocks = int(want < cap ? want : cap);
  if (fuse) {
    const int64_t rounds = ceil_div<int64_t>(M, rows * plan.blocks);
    plan.blocks = int(ceil_div<int64_t>(M, rows * rounds));
  }
  plan.run = run;
  plan.packs = kPacks;
  plan.fuse = fuse;
  return plan;
}

// In layernorm.hopper.cu. forward_v3_pipelined (half and bf16) returns false, launching nothing, where it
// does not apply or would need more than max_rounds rounds. plan_backward_tuned (float, half, bf16) plans
// the one-kernel backward `kernel` asks for (kNone where none applies), and launch_backward_tuned runs it.
template <typename T>
bool forward_v3_pipelined(const T* x, const T* w, const T* b, T* y, Acc<T>* mean, Acc<T>* rstd, int64_t M,
                          int N, Acc<T> eps, cudaStream_t stream, int64_t max_rounds);
template <typename T>
BackwardPlan plan_backward_tuned(const T* dy, const T* x, const T* w, const T* dx, int64_t M, int N,
                                 BackwardKernel kernel);
template <typename T>
void launch_backward_tuned(const BackwardPlan& plan, const T* dy, const T* x, const Acc<T>* mean,
                           const Acc<T>* rstd, const T* w, T* dx, Acc<T>* partials, T* dw, T* db, int64_t M,
                           int N, cudaStream_t stream);

}  // namespace layernorm
