// kernels/norm_engine/launch_backward.cuh: the engine's backward, host side: which kernel runs for a shape
// (engine.cuh's table), its plan, its workspace and its launch.
#pragma once

#include "backward.cuh"
#include "launch_forward.cuh"
#include "rounds.cuh"

namespace norm_engine {

// Which kernel the fast backward runs (engine.cuh's table says for which shapes).
enum class BackwardPath {
  kNone,      // no plan yet (a planner's "does not apply")
  kRows,      // backward_kernel: rows in registers, packs of kVec (vectorized) or 1, over `cluster` blocks
  kLongPair,  // backward_long_rows_kernel, then backward_long_cols_kernel: x and grad_y read twice
  kBulk,      // backward_bulk_kernel: rows by bulk copy over `cluster` blocks per row
  kRounds,    // lesson 03's backward_v2_bulk_kernel<kRms> (rounds.cuh): whole rounds of rows by bulk copy,
              // a cooperative grid that finishes grad_weight itself
};

// How it runs. blocks: the grid of backward_kernel, or the row slices of the long pair; partial_rows(): the
// rows of partial sums (one per cluster).
struct Plan {
  BackwardPath path = BackwardPath::kNone;
  bool vec = false;
  int packs = 0;
  int cluster = 1;
  dim3 block;
  int blocks = 0;
  size_t smem = 0;
  int stages = 0;     // kBulk: the ring's
  bool pipe = false;  // kBulk: the next row's pass 1 before this row's exchange
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
  plan.path = BackwardPath::kRows;
  plan.vec = vec;
  plan.packs = kPacks;
  plan.cluster = kCluster;
  return plan;
}

// backward_bulk_kernel's stages, its 2-byte rows' blocks and packs per thread (config.h says why). Rows
// longer than one block takes keep 2 packs (clusters of 4 at 32768): 4 packs over clusters of 2 measured
// 1-2.5 % slower with deliver_sums' exchange.
constexpr int kBulkStages = kBackward.bulk_stages, kBulkMinStages = kBackward.bulk_min_stages;
constexpr int kNarrow = kBackward.narrow_threads, kNarrowPacks = kBackward.narrow_packs;
template <Norm kNorm>
constexpr int kOneBlockPacks = kNorm == Norm::kRms ? kBackward.rms_one_block_packs : kNarrowPacks;
constexpr int kLayerWideRows = kBackward.layer_wide_rows;

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
// Clusters of at least `from` blocks. No plan (kNone) where none fits, or the kernel was built for an older
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
      if (ptx_version(fn) < 90) return plan;  // built for an older GPU (its body is a trap)
      const int clusters = active_clusters(fn, threads, stages * stage, cluster);
      if (clusters == 0) continue;
      plan.path = BackwardPath::kBulk;
      plan.vec = true;
      plan.packs = per;
      plan.cluster = cluster;
      plan.block = dim3(unsigned(threads));
      plan.blocks = int(clusters < M ? clusters : M) * cluster;
      plan.smem = stages * stage;
      plan.stages = stages;
      plan.pipe = stages >= kBackward.pipe_from;
      return plan;
    }
  }
  return plan;
}

// backward_bulk_kernel's plan: the fewest blocks per row that fit (plan_bulk_from), except LayerNorm's
// batches of at most kLayerWideRows rows per cluster, which take clusters of 8 where they fit. LayerNorm's
// two partial rows per cluster (grad_w's and grad_b's) cost as much as a row's worth of work where a cluster
// takes few rows: over clusters of 8 the grid writes and adds half or a quarter as many, which pays for the
// 8 blocks' exchange of each row's sums up to about 16 rows per cluster (kBackward.layer_wide_rows).
template <typename T, Norm kNorm>
Plan plan_bulk(int64_t M, int N, bool vec) {
  const Plan plan = plan_bulk_from<T, kNorm>(M, N, vec, 1);
  if (kNorm == Norm::kLayer && plan.path != BackwardPath::kNone && plan.cluster < 8 &&
      M <= int64_t(kLayerWideRows) * plan.partial_rows()) {
    const Plan wide = plan_bulk_from<T, kNorm>(M, N, vec, 8);
    if (wide.path != BackwardPath::kNone) return wide;
  }
  return plan;
}

// 2-byte rows of at least kBackward.bulk_2byte_from columns take backward_bulk_kernel before the rows in
// registers; other rows only where no register plan fits.
template <typename T>
constexpr int kBulkFrom = sizeof(T) == 2 ? kBackward.bulk_2byte_from : 0;

// RMSNorm's rows of one 16-byte pack per thread of a 1024-thread block (2-byte rows up to 8192, float up to
// 4096), in batches of more than kBackward.rounds_bytes of x (so of more than 64 rows), take lesson 03's
// backward_v2_bulk_kernel (BackwardPath::kRounds, rounds.cuh) on sm_90, as LayerNorm's 2-byte rows do:
// rounds of whole rows by bulk copy, three in flight per SM, against backward_kernel's one row prefetched
// into registers: bf16 73-78 -> 83 % of a copy at 65536 x 256 to 2048 x 8192, float 83-85 -> 89-90 % up to
// 4096 columns. Up to 1 MiB of x the rows in registers are 1.08-1.35x faster (the grid barrier and the
// rounds' set-up cost more than the row kernel plus the kernel that adds its partial column sums).
template <typename T, Norm kNorm>
constexpr bool kRounds = kNorm == Norm::kRms && sizeof(T) <= 4;
template <typename T, Norm kNorm>
Plan plan_rounds(const T* dh, int64_t M, int N, bool vec) {
  Plan plan;
  if constexpr (kRounds<T, kNorm>) {
    if (!vec || dh != nullptr || M * N * int64_t(sizeof(T)) <= kBackward.rounds_bytes) return plan;
    // planned with grad_weight of type T: the kernel of another P has the same block and shared memory
    const RoundsPlan p = plan_backward_bulk<T, true>(M, N, true);
    if (p.blocks == 0) return plan;
    plan.path = BackwardPath::kRounds;
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
// tiles' worth of blocks per SM. On the H100: rows in
// registers over clusters of 4 and 8 lost to the long-row pair; backward_bulk_kernel beat the pair
// everywhere and float rows in registers over a cluster of 2 (RMSNorm 82 % of copy against 81 %, LayerNorm
// 80 % against 59 % at 1024 x 16384), but not 2-byte rows of 16384 at 16 values per thread (61 % against 66
// %).
template <typename T, Norm kNorm>
Plan plan_backward(const T* dy, const T* dh, const T* x, const T* w, const T* dx, int64_t M, int N) {
  constexpr int V = kPack16<T>, P8 = 8 / V > 0 ? 8 / V : 1;
  const bool vec = vectorizable<T>(N, {dy, dh ? dh : dy, x, w, dx});
  Plan plan = plan_rounds<T, kNorm>(dh, M, N, vec);
  if (plan.path != BackwardPath::kNone) return plan;
  if (kBulkFrom<T> > 0 && N >= kBulkFrom<T>) plan = plan_bulk<T, kNorm>(M, N, vec);
  if (plan.path != BackwardPath::kNone) return plan;
  if (vec) {
    plan = plan_rows<T, kNorm, V, P8>(M, N, true);
    if constexpr (sizeof(T) == 4)
      if (plan.path == BackwardPath::kNone) plan = plan_bulk<T, kNorm>(M, N, vec);
    if constexpr (sizeof(T) >= 4)
      if (plan.path == BackwardPath::kNone && has_clusters())
        plan = plan_rows<T, kNorm, V, P8, 2>(M, N, true);
    if (plan.path == BackwardPath::kNone) plan = plan_rows<T, kNorm, V, 2 * P8>(M, N, true);
  } else {
    plan = plan_rows<T, kNorm, 1, 8>(M, N, false);
  }
  if (plan.path == BackwardPath::kNone) plan = plan_bulk<T, kNorm>(M, N, vec);
  if (plan.path == BackwardPath::kNone) {
    plan.path = BackwardPath::kLongPair;
    plan.vec = vec;
    const int64_t tiles = ceil_div<int64_t>(N / (vec ? V : 1), 256);
    const int64_t slices = ceil_div<int64_t>(int64_t(num_sms()) * 4, tiles);
    plan.blocks = int(slices < M ? slices : M);
  }
  return plan;
}

// The kernel plan_backward picks for these arguments on the current device, in words (engine.cuh's table
// row), for a lesson or a test to print.
inline const char* backward_path_name(BackwardPath path) {
  switch (path) {
    case BackwardPath::kRows:
      return "backward_kernel";
    case BackwardPath::kLongPair:
      return "backward_long_rows_kernel + backward_long_cols_kernel";
    case BackwardPath::kBulk:
      return "backward_bulk_kernel";
    case BackwardPath::kRounds:
      return "backward_v2_bulk_kernel<kRms>";
    default:
      return "none";
  }
}
template <typename T, Norm kNorm>
const char* describe_backward(const T* dy, const T* dh, const T* x, const T* w, const T* dx, int64_t M,
                              int N) {
  return backward_path_name(plan_backward<T, kNorm>(dy, dh, x, w, dx, M, N).path);
}

// Acc<T> values of scratch the fast backward needs: the partial rows, and (long rows) the row sums.
template <typename T, Norm kNorm>
int64_t backward_workspace(const T* dy, const T* dh, const T* x, const T* w, const T* dx, int64_t M, int N) {
  const Plan plan = plan_backward<T, kNorm>(dy, dh, x, w, dx, M, N);
  return int64_t(kSums<kNorm>) * plan.partial_rows() * N +
         (plan.path == BackwardPath::kLongPair ? kSums<kNorm> * M : 0);
}

template <typename T, Norm kNorm, typename P>
void launch_backward(const T* dy, const T* dh, const T* x, const Acc<T>* mean, const Acc<T>* rstd, const T* w,
                     T* dx, P* dw, P* db, Acc<T>* workspace, int64_t M, int N, cudaStream_t stream) {
  constexpr int V = kPack16<T>, P8 = 8 / V > 0 ? 8 / V : 1;
  const Plan plan = plan_backward<T, kNorm>(dy, dh, x, w, dx, M, N);
  if (plan.path == BackwardPath::kRows) {
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
  } else if (plan.path == BackwardPath::kRounds) {
    if constexpr (kRounds<T, kNorm>) {
      // The plan again with grad_weight's type P: it sets that kernel's shared-memory limit (planned for P =
      // T, the same block, shared memory and grid, so the workspace fits).
      const RoundsPlan p = plan_backward_bulk<T, true, P>(M, N, true);
      if (p.blocks == 0 || p.blocks > plan.blocks)
        throw std::logic_error("norm_engine: backward_v2_bulk_kernel's plan changed with grad_weight's type");
      // a cooperative launch, the split grid barrier (kBulkCopySplitBarrier's); the kernel also adds the
      // partial rows (no sum_partials_kernel)
      launch(backward_v2_bulk_kernel<T, V, true, true, P>, dim3(unsigned(p.blocks)), p.block, p.smem, stream,
             {true, false, p.cluster}, dy, x, mean, rstd, w, dx, workspace, dw, db, M, N);
      COURSE_LAUNCH_CHECK();
      return;
    }
  } else if (plan.path == BackwardPath::kBulk) {
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

}  // namespace norm_engine
