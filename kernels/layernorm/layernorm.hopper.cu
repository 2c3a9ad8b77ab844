// kernels/layernorm/layernorm.hopper.cu: the tuning of lesson 03's LayerNorm past the ladder of
// kernels/layernorm/layernorm.cu, explained in the optional appendix notebooks/03b_layernorm_hopper.ipynb.
// The default (kAuto, see layernorm_choices.h) runs these where they were measured faster.
//
// A memory-bound kernel runs at copy speed only with enough bytes in flight per SM (memory latency x
// bandwidth / number of SMs, by Little's law), and registers and shared memory cap how many a thread or
// a block can keep asking for. What each step adds:
//
//   forward v3, pipelined   forward_v3_pipelined_kernel, forward_v3_pipelined (ForwardKernel::kPipelined):
//                 a persistent grid; each thread copies its share of the next row into shared memory
//                 (cp.async) before it reduces the current one, so every block always has a row in
//                 flight: twice forward_v3_kernel's bytes per SM at the same registers. Any GPU, but the
//                 default only on sm_90+ with few rounds (with many, the static split of rows is slower
//                 than the block scheduler's balancing).
//   backward v2, cooperative   backward_v2_cooperative_kernel (BackwardKernel::kCooperative): backward
//                 v2's row loop, then a grid-wide barrier (cooperative launch, grid.sync) and the column
//                 sums finished by all blocks in a fixed order (finish_column_sums): no second kernel, and
//                 a grid sized to equal rounds. Any GPU with cooperative launch.
//   backward v2, bulk copy   backward_v2_bulk_kernel<kEarly = false> (kBulkCopy, sm_90+; rounds.cuh):
//                 the rows arrive by the Tensor Memory Accelerator's bulk copies into a ring of 4
//                 shared-memory buffers: three rounds in flight per SM, counted by mbarriers, whatever
//                 the threads are doing (a thread's register loads all wait on one scoreboard).
//   backward v2, split barrier   backward_v2_bulk_kernel<kEarly = true> (kBulkCopySplitBarrier): the last
//                 round's column sums and partial row first, then arrive at the grid barrier
//                 (barrier_arrive), compute that round's grad_x, and only then wait (barrier_wait): the
//                 barrier's latency hides behind the work.
//   both bulk kernels, clustered   the same kernels launched in thread block clusters of 2 where a block's
//                 partial row is large (LayerNorm's 64 KB at 8192 columns): the pair adds its column sums
//                 through distributed shared memory, so the grid writes and reads back half the partial
//                 rows (plan_backward_bulk, norm_engine/rounds.cuh). The sums after the barrier read four
//                 columns per 16-byte load (add_columns_in_order<4>).
//   plan_backward_tuned, launch_backward_tuned: the plans and launches of the three backward kernels.
#include <cooperative_groups.h>

#include "layernorm_common.cuh"
#include "norm_engine/rounds.cuh"  // finish_column_sums, backward_v2_bulk_kernel, plan_backward_bulk

using namespace layernorm;
using namespace norm_engine;

namespace {

// ------------------------------------------------------------------------------------------------
// Forward v3, pipelined
// ------------------------------------------------------------------------------------------------

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80+; a plain
// copy before), and the waits for them: the thread's own copies, in the groups it committed.
namespace pipe {
__device__ __forceinline__ void copy16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
      "l"(src)
      : "memory");
#else
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
__device__ __forceinline__ void commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int kPending>  // wait until at most kPending of this thread's groups are still in flight
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
#endif
}
}  // namespace pipe

// The same row groups and arithmetic as forward_v3_kernel, but each block keeps its rows coming. A
// persistent grid (as many blocks as fit at once, sized to equal rounds) walks the rows, and each thread
// copies its share of the next row into shared memory (cp.async: no registers held while it is in
// flight) before it reduces the current one. Why: in forward_v3_kernel a block has nothing in flight from
// the moment its row lands until it ends (two reductions, weight and bias, the store), and registers cap
// it at one row per block: 8 blocks of 256 threads at 32 registers hold at most 64 KB per SM. Here each
// block has its next row on the way too: 128 KB per SM at the same 32 registers (held to them by
// __launch_bounds__: 8 blocks per SM). With many rounds the static split loses to the block scheduler's
// balancing (some SMs get less bandwidth than others, and here every block must finish its share).
template <typename T, int kVec, int kPacks>
__global__ __launch_bounds__(256, 8) void forward_v3_pipelined_kernel(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
    Acc<T>* __restrict__ mean, Acc<T>* __restrict__ rstd, int64_t M, int N, Acc<T> eps) {
  __shared__ Acc<T> buf[2][32];
  extern __shared__ float4 stage_[];  // [2 stages][R rows][N] of T
  T* stage = reinterpret_cast<T*>(stage_);
  const int R = blockDim.y;
  const int64_t step = int64_t(gridDim.x) * R;
  const auto fetch = [&](int64_t row, int st) {  // this thread's packs of `row` into stage st
    if (row < M) {
      T* dst = stage + (int64_t(st) * R + threadIdx.y) * N;
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int j = (threadIdx.x + p * blockDim.x) * kVec;
        if (j < N) pipe::copy16(dst + j, x + row * N + j);
      }
    }
    pipe::commit();  // an empty group past the last row keeps the count of groups in step
  };
  int64_t row = blockIdx.x * int64_t(R) + threadIdx.y;
  fetch(row, 0);
  int st = 0;
  for (int64_t first = blockIdx.x * int64_t(R); first < M; first += step, row += step, st ^= 1) {
    fetch(row + step, st ^ 1);
    pipe::wait<1>();  // this row's copies (not the next row's) have landed
    const bool active = row < M;
    const T* xs = stage + (int64_t(st) * R + threadIdx.y) * N;
    Raw<T, kVec> v[kPacks];
    const Acc<T> sum = load_row(v, xs, N, active);
    normalize_row<T, kVec, kPacks>(v, sum, w, b, y, mean, rstd, row, N, eps, active, buf);
  }
  pipe::wait<0>();
}

// forward_v3_pipelined_kernel with the widths of launch_forward_v3, for blocks of up to 256 threads; false
// (nothing launched) where a block would be larger or the persistent grid would need more than max_rounds.
template <typename T, int kVec, int kPacks>
bool launch_forward_v3_pipelined(const T* x, const T* w, const T* b, T* y, Acc<T>* mean, Acc<T>* rstd,
                                 int64_t M, int N, Acc<T> eps, cudaStream_t stream, int64_t max_rounds) {
  const int threads = row_threads(N / kVec, kPacks);
  const int rows = threads >= 128 ? 1 : 128 / threads;
  if (threads == 0 || threads * rows > 256) return false;
  const dim3 block(threads, rows);
  const size_t smem = 2 * size_t(rows) * N * sizeof(T);  // two stages of the block's rows
  auto kernel = forward_v3_pipelined_kernel<T, kVec, kPacks>;
  if (smem > size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>())) return false;
  const int per_sm = blocks_per_sm(reinterpret_cast<const void*>(kernel), threads * rows, smem);
  if (per_sm == 0) return false;
  const int64_t want = ceil_div<int64_t>(M, rows), cap = int64_t(per_sm) * num_sms();
  const int64_t rounds = ceil_div<int64_t>(M, rows * (want < cap ? want : cap));
  if (rounds > max_rounds) return false;
  const int64_t blocks = ceil_div<int64_t>(M, rows * rounds);  // as few blocks as give equal rounds
  kernel<<<unsigned(blocks), block, smem, stream>>>(x, w, b, y, mean, rstd, M, N, eps);
  return true;
}

// ------------------------------------------------------------------------------------------------
// Backward v2, cooperative: the column sums finished in the same kernel
// ------------------------------------------------------------------------------------------------

// backward_v2_kernel's rows, then the column sums in the same kernel. It is launched cooperatively (every
// block resident at once): each block writes its partial row, cooperative_groups' grid.sync() (the
// driver's own barrier: nothing to zero, safe on any stream, and it fences memory), and then all blocks
// split the 2N column sums. Why faster: no second launch and no short, nearly idle sum_partials_kernel at
// the end; the partial rows are read back from L2 by the whole GPU at once; and the grid is sized to
// whole rounds (plan_backward_rows with fuse), which also means fewer partial rows.
template <typename T, int kVec, int kPacks>
__global__ __launch_bounds__(1024) void backward_v2_cooperative_kernel(
    const T* __restrict__ dy, const T* __restrict__ x, const Acc<T>* __restrict__ mean,
    const Acc<T>* __restrict__ rstd, const T* __restrict__ w, T* __restrict__ dx,
    Acc<T>* __restrict__ partials, T* __restrict__ dw, T* __restrict__ db, int64_t M, int N) {
  Acc<T>* scratch = backward_v2_rows<T, kVec, kPacks>(dy, x, mean, rstd, w, dx, partials, M, N);
  cooperative_groups::this_grid().sync();
  finish_column_sums(partials, N, dw, db, scratch);
}

}  // namespace

namespace layernorm {

template <typename T>
bool forward_v3_pipelined(const T* x, const T* w, const T* b, T* y, Acc<T>* mean, Acc<T>* rstd, int64_t M,
                          int N, Acc<T> eps, cudaStream_t stream, int64_t max_rounds) {
  // forward v3's widths for 2-byte types (launch_forward_v3 in layernorm.cu): 32 bytes per thread
  return launch_forward_v3_pipelined<T, kPack16<T>, kFwdBytes / 32>(x, w, b, y, mean, rstd, M, N, eps, stream,
                                                                    max_rounds);
}

// The bulk-copy kernels where asked for and they apply (16-byte aligned rows of at most 1024 packs, sm_90+),
// else the cooperative kernel at backward v2's widths (2-byte types: 16 bytes per thread for rows up to
// 4096, else 32; float 32), where the GPU has cooperative launch and the row is vectorizable.
template <typename T>
BackwardPlan plan_backward_tuned(const T* dy, const T* x, const T* w, const T* dx, int64_t M, int N,
                                 BackwardKernel kernel) {
  constexpr int V = kPack16<T>;
  BackwardPlan plan;
  if (!vectorizable<T>(N, {dy, x, w, dx})) return plan;
  const bool bulk = kernel == BackwardKernel::kBulkCopy || kernel == BackwardKernel::kBulkCopySplitBarrier;
  if (bulk || (kernel == BackwardKernel::kAuto && sizeof(T) == 2)) {
    const RoundsPlan rounds = plan_backward_bulk<T>(M, N, kernel != BackwardKernel::kBulkCopy);
    if (rounds.blocks > 0) {
      plan.run = BackwardRun::kBulkRounds;
      plan.packs = 1;
      plan.fuse = true;
      plan.early = rounds.early;
      plan.cluster = rounds.cluster;
      plan.block = rounds.block;
      plan.blocks = rounds.blocks;
      plan.smem = rounds.smem;
      return plan;
    }
  }
  if (device_attribute<cudaDevAttrCooperativeLaunch>() == 0) return plan;
  if constexpr (sizeof(T) == 2)
    if (N <= 4096)
      plan = plan_backward_rows<T, V, kBwdBytes / 32>(backward_v2_cooperative_kernel<T, V, kBwdBytes / 32>,
                                                      BackwardRun::kRows, M, N, true);
  if (plan.run == BackwardRun::kNone)
    plan = plan_backward_rows<T, V, kBwdBytes / 16>(backward_v2_cooperative_kernel<T, V, kBwdBytes / 16>,
                                                    BackwardRun::kRows, M, N, true);
  return plan;
}

template <typename T>
void launch_backward_tuned(const BackwardPlan& plan, const T* dy, const T* x, const Acc<T>* mean,
                           const Acc<T>* rstd, const T* w, T* dx, Acc<T>* partials, T* dw, T* db, int64_t M,
                           int N, cudaStream_t stream) {
  constexpr int V = kPack16<T>;
  const auto run = [&](auto kernel) {  // cooperative: every block resident at once
    launch(kernel, dim3(plan.blocks), plan.block, plan.smem, stream, {true, false, plan.cluster}, dy, x, mean,
           rstd, w, dx, partials, dw, db, M, N);
  };
  if (plan.run == BackwardRun::kBulkRounds && plan.early) run(backward_v2_bulk_kernel<T, V, true>);
  if (plan.run == BackwardRun::kBulkRounds && !plan.early) run(backward_v2_bulk_kernel<T, V, false>);
  if constexpr (sizeof(T) == 2)
    if (plan.run == BackwardRun::kRows && plan.packs == kBwdBytes / 32)
      run(backward_v2_cooperative_kernel<T, V, kBwdBytes / 32>);
  if (plan.run == BackwardRun::kRows && plan.packs == kBwdBytes / 16)
    run(backward_v2_cooperative_kernel<T, V, kBwdBytes / 16>);
  COURSE_LAUNCH_CHECK();
}

template bool forward_v3_pipelined<__half>(const __half*, const __half*, const __half*, __half*, float*,
                                           float*, int64_t, int, float, cudaStream_t, int64_t);
template bool forward_v3_pipelined<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                  const __nv_bfloat16*, __nv_bfloat16*, float*, float*,
                                                  int64_t, int, float, cudaStream_t, int64_t);
#define INSTANTIATE(T)                                                                               \
  template BackwardPlan plan_backward_tuned<T>(const T*, const T*, const T*, const T*, int64_t, int, \
                                               BackwardKernel);                                      \
  template void launch_backward_tuned<T>(const BackwardPlan&, const T*, const T*, const Acc<T>*,     \
                                         const Acc<T>*, const T*, T*, Acc<T>*, T*, T*, int64_t, int, \
                                         cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)

}  // namespace layernorm
