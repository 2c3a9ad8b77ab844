// kernels/norm_engine/launch_forward.cuh: the engine's forward, host side: which kernel runs for a shape
// (engine.cuh's table), its plan and its launch. The .cpp guarantees M > 0, 0 < N < 2^31, pointers on the
// current device.
#pragma once

#include "config.h"
#include "forward.cuh"
#include "occupancy.h"

namespace norm_engine {

// Thread block clusters: sm_90 and newer.
inline bool has_clusters() { return device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9; }

// The main kernels (forward_kernel, forward_bulk_kernel, backward_bulk_kernel) launch with PDL (common.h) and
// wait for the kernel before them (wait_for_previous_grid) before they touch global memory: in a stream of
// kernels, as in a training step, their launch and set-up (barriers, the cluster's sync) overlap the end of
// the kernel before. Back-to-back calls on the H100: bf16 512 x 32768 backward 77.9 -> 81.0 % of a copy
// (LayerNorm), forward 88.4 -> 92.8 %; rows in registers 96.7 -> 102.4 % (RMSNorm bf16 2048 x 8192); a call
// timed alone after an L2 flush does not change. COURSE_NO_PDL=1 (run time) turns it off.
constexpr bool kPdlMain = true;

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
// one wave), and at its edge so did RMSNorm bf16 4096 x 256, 3.4 -> 3.6 us (LayerNorm there: 3.8 -> 3.6 us).
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
// 1.5 waves of full SMs (H100, % of a copy, one row -> kRows): RMSNorm bf16 256 wide 84.4 -> 95.6 (2^22
// elements, 1.9 waves), 91.8 -> 98.1 (2^24); LayerNorm float32 256 wide 88.3 -> 97.7 (2^22); but bf16 8192 x
// 512 and 4096 x 1024 (2^22, one wave) lost 110 -> 98 % (half the warps to hide the latency with).
template <typename T>
int forward_short_rows(int64_t M, int N) {
  constexpr int V = kPack16<T>, P16 = 16 / V;
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

// forward_long_kernel over a cluster of 2, 4 or 8 blocks per row (the fewest whose slices fit in shared
// memory), sm_90; false (nothing launched) where none fits.
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
  if (!keep && has_clusters() &&
      launch_forward_cluster<T, kNorm, kAdd, kVec, 2>(x, res, w, b, y, h, mean, rstd, M, N, eps, stream))
    return;
  kernel<<<unsigned(M), threads, keep ? bytes : 0, stream>>>(x, res, w, b, y, h, mean, rstd, N, eps, keep);
  COURSE_LAUNCH_CHECK();
}

// forward_bulk_kernel's packs per thread: 2, 4 or 8 (the fewest that cover a slice), the kernel of each.
constexpr int kFwdBulkThreads = kForward.bulk_threads, kFwdBulkStages = kForward.bulk_stages;
constexpr int kFwdBulkMostPacks = kForward.bulk_most_packs;
template <typename T, Norm kNorm, bool kAdd>
auto forward_bulk(int packs) {
  constexpr int V = kPack16<T>, B = kFwdBulkThreads, P = kFwdBulkMostPacks;
  return packs <= 2   ? forward_bulk_kernel<T, kNorm, kAdd, V, 2, B>
         : packs <= 4 ? forward_bulk_kernel<T, kNorm, kAdd, V, 4, B>
                      : forward_bulk_kernel<T, kNorm, kAdd, V, P, B>;
}

// forward_bulk_kernel's launch: the fewest blocks per row (1, 2, 4 or 8) whose slices fit kFwdBulkMostPacks
// packs per thread and leave room for 3 stages in shared memory, twice as many while the rows are too few to
// fill the GPU otherwise; a persistent grid of as many clusters as are resident at once (at most M). clusters
// == 0 (no plan) where none fits, or the kernel was built for an older GPU.
struct ForwardBulkPlan {
  int cluster = 1, clusters = 0, stages = 0, packs = 0;
  size_t smem = 0;
};

template <typename T, Norm kNorm, bool kAdd>
ForwardBulkPlan plan_forward_bulk(int64_t M, int N) {
  ForwardBulkPlan plan;
  if constexpr (sizeof(Acc<T>) == 4) {
    constexpr int V = kPack16<T>;
    if (!has_clusters() || ptx_version(reinterpret_cast<const void*>(forward_bulk<T, kNorm, kAdd>(8))) < 90)
      return plan;  // (built for an older GPU: the body is a trap)
    const size_t room = size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) - 1024;  // static
    const int64_t sms = num_sms();
    for (int cluster = 1; cluster <= 8; cluster *= 2) {
      if (N % (cluster * V) != 0) continue;
      const int packs = ceil_div(N / cluster / V, kFwdBulkThreads);
      // LayerNorm's 2-byte rows over 65536: at most 4 packs per thread, so clusters of 8 (bf16 128 x 131072:
      // 82 % of a copy against 78-80 % with 8 packs over clusters of 4)
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

// forward_bulk_kernel where it measured faster than forward_kernel (rows in registers, up to 32 values per
// thread) and forward_long_kernel (H100), from kForward.bulk_from (16384) columns:
// - rows in registers: RMSNorm of 2-byte types and LayerNorm (bf16 RMSNorm 512 x 32768: 96 % of a copy
//   against 79 %), where each cluster gets two rows or more (one row each: nothing hides the wait for a whole
//   slice; 64 x 16384 bf16 75 % against 82 %); not float RMSNorm (97.6 % either way at 2048 x 32768) nor the
//   fused add (bf16 1024 x 16384: 93 % against 98 %);
// - longer rows: float ones (RMSNorm 256 x 65536 89 % against 81 %, LayerNorm 83 % against 69 %, the fused
//   add 90 % against 85 %), and 2-byte ones in small batches (M <= SMs / 4, e.g. 16 x 65536 bf16: 63 %
//   against 61 %, 1 x 65536: 63 % against 46 %) or of kForward.bulk_2byte_rounds rows per cluster (bf16
//   256 x 65536 RMSNorm 98.0 % against 89.2 % at 3.9 rows per cluster of 2, LayerNorm 84.8 % against 79.9 %
//   at 8.5 per cluster of 4, 88-92 % over clusters of 2 with its 8 packs of weights kept opaque; 64 x 262144
//   RMSNorm 88.9 % against 63.1 %); between them forward_long_kernel (LayerNorm bf16 64 x 65536, 2.1 rows
//   per cluster: 68.6 % against 63.2 %); not the fused add's (bf16 256 x 65536: 90.1 % against 94.8 %).
// false: nothing launched.
template <typename T, Norm kNorm, bool kAdd>
bool launch_forward_bulk(const T* x, const T* res, const T* w, const T* b, T* y, T* h, Acc<T>* mean,
                         Acc<T>* rstd, int64_t M, int N, Acc<T> eps, bool in_registers, cudaStream_t stream) {
  if constexpr (sizeof(Acc<T>) == 4) {
    if (N < kForward.bulk_from) return false;
    if (in_registers && (kAdd || (sizeof(T) == 4 && kNorm == Norm::kRms))) return false;
    const ForwardBulkPlan plan = plan_forward_bulk<T, kNorm, kAdd>(M, N);
    if (plan.clusters == 0 || (in_registers && M <= plan.clusters)) return false;
    if (!in_registers && sizeof(T) == 2 && M * 4 > num_sms() &&
        (kAdd || M < kForward.bulk_2byte_rounds * plan.clusters))
      return false;
    launch(forward_bulk<T, kNorm, kAdd>(plan.packs), dim3(unsigned(plan.clusters * plan.cluster)),
           dim3(kFwdBulkThreads), plan.smem, stream, {false, kPdlMain, plan.cluster}, x, res, w, b, y, h,
           mean, rstd, M, N, eps, plan.stages, plan.stages >= kBackward.pipe_from, first_rows(plan.stages));
    COURSE_LAUNCH_CHECK();
    return true;
  }
  return false;
}

// The most values of a row one thread of forward_kernel holds (kForward.max_values).
constexpr int kFwdMaxValues = kForward.max_values;

// The fast forward: on sm_90, forward_bulk_kernel where launch_forward_bulk takes the shape; else rows in
// registers (16 values per thread, 32 where a row needs more than 1024 threads at 16), else one block per
// row, or a cluster of blocks per row where one block's shared memory cannot hold it (sm_90); one value per
// pack where the row is not vectorizable. (Rows in registers over a thread block cluster, as backward does,
// measured slower.)
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

}  // namespace norm_engine
