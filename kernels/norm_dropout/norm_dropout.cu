// kernels/norm_dropout/norm_dropout.cu: RMSNorm then dropout, the forward in one kernel, and a fused backward
// (lesson 05).
//
//   y = dropout(x * rstd * weight, p),   rstd = 1 / sqrt(mean(x^2) + eps),  per row of N.
//
// The unfused pair (course::rms_norm, then course::dropout) writes the normalized row and reads it back:
// 4*M*N elements. Here the row statistic, the normalization, the scale by weight, the Philox mask and
// 1 / (1 - p) happen in registers and y is written once: 2*M*N elements, a copy's bytes. The mask is
// course::dropout's: flat element i of y is kept iff philox::keep(seed, offset, i, drop_threshold(p)), so
// course::dropout_backward regenerates it from the (seed, offset) this kernel writes to state_out.
//
//   forward v1  forward_kernel / forward_long_kernel, rms_norm_dropout_forward_v1: RMSNorm's forward v2
//               layout (kernels/rmsnorm/rmsnorm.cu): a row group of 1 to 32 warps per row, the row in
//               registers as 16-byte packs, one group sum of squares; the 4-word Philox blocks of a thread's
//               packs drawn after its loads are issued and before their values are needed (arithmetic beside
//               the wait); y = kept ? x * rstd * w * scale : 0, rounded once to T. 16 values a thread, else
//               32 (float64: 16, in blocks of at most 512 threads, since more would spill); rows too long for
//               registers: one block per row, the row kept in shared memory where it fits (else read again,
//               from L2). One value per pack where N or a pointer does not allow 16-byte packs.
//
//   backward v1 (no kernel here): course::dropout_backward, then course::rms_norm_backward, from the .cpp;
//               the masked grad_y is written and read back: 5*M*N elements.
//   backward v2 backward_kernel and sum_partials_kernel, rms_norm_dropout_backward_v2: the mask regenerated
//               as grad_y is loaded and RMSNorm's backward in the same pass, 3*M*N elements: persistent row
//               groups with 8 values of x and of grad_y a thread, each thread summing grad_weight for its
//               own columns in registers across rows, the block's groups then added in shared memory and
//               the blocks' partial rows in a fixed order (no atomics). Longer rows: v1.
#include "norm_dropout.h"
#include "norm_engine/grad.cuh"
#include "norm_engine/occupancy.h"  // row_threads, vectorizable, blocks_per_sm
#include "norm_engine/row.cuh"      // Raw, to_pack, group_sum, rsqrt_acc

namespace {

using norm_engine::grad_x;
using norm_engine::group_sum;
using norm_engine::Raw;
using norm_engine::row_threads;
using norm_engine::rsqrt_acc;
using norm_engine::to_pack;
using norm_engine::vectorizable;

// Keep bits of the kVec elements from flat index `first` on: bit k for element first + k. A pack spans
// up to kVec / 4 + 1 groups of 4 (one Philox call each); an aligned pack (first % 4 == 0, kVec a multiple
// of 4) exactly kVec / 4.
template <int kVec>
__device__ __forceinline__ uint32_t keep_bits(uint64_t seed, uint64_t offset, int64_t first,
                                              uint64_t threshold) {
  constexpr int kGroups = (kVec + 3) / 4 + 1;
  const int64_t g0 = first / 4;
  const int shift = int(first % 4), span = int((first + kVec - 1) / 4 - g0) + 1;
  uint32_t bits = 0;
#pragma unroll
  for (int q = 0; q < kGroups; ++q)
    if (q < span) bits |= philox::keep_bits4(seed, offset, uint64_t(g0 + q), threshold) << (4 * q);
  return bits >> shift;
}

// y's kVec values at column j of row `row`: x * rstd * w, scaled where kept, 0 where dropped.
template <typename T, int kVec>
__device__ __forceinline__ void store_dropped(T* __restrict__ y, int64_t row, int N, int j,
                                              const Raw<T, kVec>& v, const Raw<T, kVec>& wv, Acc<T> rs,
                                              uint32_t bits, Acc<T> scale) {
  Acc<T> out[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const Acc<T> n = v[k] * rs * wv[k];  // course::rms_norm's expression, so kept values round alike
    out[k] = (bits >> k) & 1u ? n * scale : Acc<T>(0);
  }
  *reinterpret_cast<Pack<T, kVec>*>(y + row * N + j) = to_pack<T>(out);
}

__device__ __forceinline__ void write_state(int64_t* state_out, uint64_t seed, uint64_t offset) {
  if (state_out != nullptr && blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    state_out[0] = static_cast<int64_t>(seed);
    state_out[1] = static_cast<int64_t>(offset);
  }
}

// Threads per block of forward_kernel: 512 for double (16 or 32 doubles a thread, with the Philox rounds,
// need more than the 64 registers a thread of a 1024-thread block gets), else 1024.
template <typename T>
constexpr int kMaxThreads = sizeof(T) == 8 ? 512 : 1024;

// Rows in registers: row group threadIdx.y of block b owns row b * blockDim.y + threadIdx.y; pack c of the
// row goes to thread c % blockDim.x (each warp-wide load is 512 contiguous bytes).
template <typename T, int kVec, int kPacks>
__global__ __launch_bounds__(kMaxThreads<T>) void forward_kernel(const T* __restrict__ x,
                                                                 const T* __restrict__ w, T* __restrict__ y,
                                                                 Acc<T>* __restrict__ rstd, int64_t M, int N,
                                                                 Acc<T> eps, philox::RngState rng,
                                                                 uint64_t threshold, Acc<T> scale,
                                                                 int64_t* __restrict__ state_out) {
  using acc_t = Acc<T>;
  __shared__ acc_t buf[32];
  uint64_t seed, offset;
  philox::unpack(rng, seed, offset);
  write_state(state_out, seed, offset);
  const int64_t row = blockIdx.x * int64_t(blockDim.y) + threadIdx.y;
  const bool active = row < M;
  Raw<T, kVec> v[kPacks];
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int j = (threadIdx.x + p * blockDim.x) * kVec;
    if (active && j < N) v[p].load(x + row * N + j);
  }
  uint32_t bits[kPacks];
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int j = (threadIdx.x + p * blockDim.x) * kVec;
    bits[p] = active && j < N ? keep_bits<kVec>(seed, offset, row * N + j, threshold) : 0u;
  }
  acc_t s[1] = {0};
#pragma unroll
  for (int p = 0; p < kPacks; ++p)
    if (active && (threadIdx.x + p * blockDim.x) * kVec < N)
#pragma unroll
      for (int k = 0; k < kVec; ++k) s[0] += v[p][k] * v[p][k];
  group_sum(s, buf);
  const acc_t rs = rsqrt_acc(s[0] / N + eps);
  if (!active) return;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int j = (threadIdx.x + p * blockDim.x) * kVec;
    if (j < N) {
      Raw<T, kVec> wv;
      wv.load(w + j);
      store_dropped<T, kVec>(y, row, N, j, v[p], wv, rs, bits[p], scale);
    }
  }
  if (threadIdx.x == 0) rstd[row] = rs;
}

// One block per row: the first pass loads four packs per thread at a time, keeps them in shared memory
// (`keep`, where the row fits) and sums their squares; the second reads the row from there (or again from
// global memory, mostly L2), draws the mask and writes y.
template <typename T, int kVec>
__global__ __launch_bounds__(1024) void forward_long_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                            T* __restrict__ y, Acc<T>* __restrict__ rstd,
                                                            int N, Acc<T> eps, philox::RngState rng,
                                                            uint64_t threshold, Acc<T> scale,
                                                            int64_t* __restrict__ state_out, bool keep) {
  using acc_t = Acc<T>;
  constexpr int U = 4;
  extern __shared__ float4 smem_[];
  T* kept = reinterpret_cast<T*>(smem_);
  __shared__ acc_t buf[32];
  uint64_t seed, offset;
  philox::unpack(rng, seed, offset);
  write_state(state_out, seed, offset);
  const int64_t row = blockIdx.x;
  const int packs = N / kVec;
  acc_t s[1] = {0};
  for (int c0 = threadIdx.x; c0 < packs; c0 += U * blockDim.x) {
    Raw<T, kVec> v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (c0 + u * blockDim.x < packs) v[u].load(x + row * N + (c0 + u * blockDim.x) * kVec);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * blockDim.x;
      if (c < packs) {
        if (keep) v[u].store(kept + c * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[0] += v[u][k] * v[u][k];
      }
    }
  }
  group_sum(s, buf);  // also makes the kept row visible to the whole block
  const acc_t rs = rsqrt_acc(s[0] / N + eps);
  for (int c = threadIdx.x; c < packs; c += blockDim.x) {
    const uint32_t bits = keep_bits<kVec>(seed, offset, row * N + int64_t(c) * kVec, threshold);
    Raw<T, kVec> v, wv;
    v.load((keep ? kept : x + row * N) + c * kVec);
    wv.load(w + c * kVec);
    store_dropped<T, kVec>(y, row, N, c * kVec, v, wv, rs, bits, scale);
  }
  if (threadIdx.x == 0) rstd[row] = rs;
}

template <typename T, int kVec, int kPacks>
bool launch_rows(const T* x, const T* w, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                 philox::RngState rng, uint64_t threshold, Acc<T> scale, int64_t* state_out,
                 cudaStream_t stream) {
  if (N % kVec != 0) return false;
  const int threads = row_threads(N / kVec, kPacks);
  if (threads == 0 || threads > kMaxThreads<T>) return false;
  const int rows = threads >= 128 ? 1 : 128 / threads;
  forward_kernel<T, kVec, kPacks><<<unsigned(ceil_div<int64_t>(M, rows)), dim3(threads, rows), 0, stream>>>(
      x, w, y, rstd, M, N, eps, rng, threshold, scale, state_out);
  COURSE_LAUNCH_CHECK();
  return true;
}

template <typename T, int kVec>
void launch_long(const T* x, const T* w, T* y, Acc<T>* rstd, int64_t M, int N, Acc<T> eps,
                 philox::RngState rng, uint64_t threshold, Acc<T> scale, int64_t* state_out,
                 cudaStream_t stream) {
  const size_t bytes = size_t(N) * sizeof(T);
  const int threads = N / kVec >= 4 * 1024 ? 1024 : 512;
  const auto kernel = forward_long_kernel<T, kVec>;
  const bool keep =
      bytes + 32 * sizeof(Acc<T>) <= size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) &&
      norm_engine::blocks_per_sm(reinterpret_cast<const void*>(kernel), threads, bytes) > 0;
  kernel<<<unsigned(M), threads, keep ? bytes : 0, stream>>>(x, w, y, rstd, N, eps, rng, threshold, scale,
                                                             state_out, keep);
  COURSE_LAUNCH_CHECK();
}

// Backward v2: persistent row groups (block b, group r: rows b * R + r, then + gridDim.x * R, ...). A thread
// owns the same columns in every row it takes, so it sums its columns of g * xhat in registers across rows;
// at the end the block's R groups add theirs in shared memory, in group order, into the block's row of
// `partials` ([gridDim.x][N]); sum_partials_kernel adds those rows in order (no atomics: the same bits on
// every run). grad_y, x and grad_x are each touched once: 3*M*N elements, and the mask never stored.
template <typename T, int kVec, int kPacks>
__global__ __launch_bounds__(kMaxThreads<T>) void backward_kernel(
    const T* __restrict__ dy, const T* __restrict__ x, const Acc<T>* __restrict__ rstd,
    const T* __restrict__ w, T* __restrict__ dx, Acc<T>* __restrict__ partials, int64_t M, int N,
    philox::RngState rng, uint64_t threshold, Acc<T> scale) {
  using acc_t = Acc<T>;
  __shared__ acc_t buf[2][32];
  extern __shared__ float4 smem_[];
  uint64_t seed, offset;
  philox::unpack(rng, seed, offset);
  const int R = blockDim.y;
  const acc_t inv_n = acc_t(1) / N;
  acc_t aw[kPacks][kVec];
#pragma unroll
  for (int p = 0; p < kPacks; ++p)
#pragma unroll
    for (int k = 0; k < kVec; ++k) aw[p][k] = 0;
  const auto in_row = [&](int p) { return (threadIdx.x + p * blockDim.x) * kVec < N; };
  const int64_t step = int64_t(gridDim.x) * R;
  int parity = 0;
  for (int64_t first = blockIdx.x * int64_t(R); first < M; first += step, parity ^= 1) {
    const int64_t row = first + threadIdx.y;
    const bool active = row < M;
    Raw<T, kVec> xv[kPacks], gv[kPacks];
#pragma unroll
    for (int p = 0; p < kPacks; ++p)
      if (active && in_row(p)) {
        const int64_t off = row * N + (threadIdx.x + p * blockDim.x) * kVec;
        xv[p].load(x + off);
        gv[p].load(dy + off);
      }
    uint32_t bits[kPacks];
#pragma unroll
    for (int p = 0; p < kPacks; ++p)
      bits[p] =
          active && in_row(p)
              ? keep_bits<kVec>(seed, offset, row * N + (threadIdx.x + p * blockDim.x) * kVec, threshold)
              : 0u;
    const acc_t rs = active ? rstd[row] : acc_t(0);
    const auto g = [&](int p, int k) { return (bits[p] >> k) & 1u ? gv[p][k] * scale : acc_t(0); };
    acc_t s[1] = {0};
#pragma unroll
    for (int p = 0; p < kPacks; ++p)
      if (active && in_row(p)) {
        Raw<T, kVec> wv;
        wv.load(w + (threadIdx.x + p * blockDim.x) * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) s[0] += g(p, k) * wv[k] * xv[p][k] * rs;
      }
    group_sum(s, buf[parity]);
    if (!active) continue;  // every group of the block still meets the next group_sum
    const acc_t mgx = s[0] * inv_n;
#pragma unroll
    for (int p = 0; p < kPacks; ++p)
      if (in_row(p)) {
        const int j = (threadIdx.x + p * blockDim.x) * kVec;
        Raw<T, kVec> wv;
        wv.load(w + j);
        acc_t out[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const acc_t gk = g(p, k), xh = xv[p][k] * rs;
          out[k] = grad_x(rs, gk * wv[k], acc_t(0), xh, mgx);  // RMSNorm: mean(g) = 0
          aw[p][k] += gk * xh;
        }
        *reinterpret_cast<Pack<T, kVec>*>(dx + row * N + j) = to_pack<T>(out);
      }
  }
  acc_t* sums =
      R > 1 ? reinterpret_cast<acc_t*>(smem_) + threadIdx.y * N : partials + blockIdx.x * int64_t(N);
#pragma unroll
  for (int p = 0; p < kPacks; ++p)
    if (in_row(p))
#pragma unroll
      for (int k = 0; k < kVec; ++k) sums[(threadIdx.x + p * blockDim.x) * kVec + k] = aw[p][k];
  if (R == 1) return;
  __syncthreads();
  const acc_t* all = reinterpret_cast<const acc_t*>(smem_);
  for (int j = threadIdx.y * blockDim.x + threadIdx.x; j < N; j += blockDim.x * R) {
    acc_t sum = 0;
    for (int r = 0; r < R; ++r) sum += all[r * N + j];
    partials[blockIdx.x * int64_t(N) + j] = sum;
  }
}

// grad_weight: the G partial rows of each column added in row order; P is T, or float beside a half/bf16 x.
template <typename T, typename P>
__global__ void sum_partials_kernel(const Acc<T>* __restrict__ partials, int G, int N, P* __restrict__ dw) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= N) return;
  Acc<T> s[4] = {0, 0, 0, 0};
  int g = 0;
  for (; g + 4 <= G; g += 4)
#pragma unroll
    for (int k = 0; k < 4; ++k) s[k] += partials[int64_t(g + k) * N + j];
  for (; g < G; ++g) s[0] += partials[int64_t(g) * N + j];
  const Acc<T> sum = (s[0] + s[1]) + (s[2] + s[3]);
  if constexpr (std::is_same_v<P, T>)
    dw[j] = from_acc<T>(sum);
  else
    dw[j] = static_cast<P>(sum);
}

// How backward v2 runs: packs of kVec values (vec) or of 1, `packs` of them a thread, `block` = (threads per
// row, R rows), `blocks` (= rows of partial sums), and the dynamic shared memory of the R groups' sums.
struct BackwardPlan {
  bool ok = false, vec = false;
  int packs = 0, blocks = 0;
  dim3 block;
  size_t smem = 0;
};

// Rows of up to kMaxThreads<T> threads per block, their column sums within 48 KB of shared memory (no opt-in,
// so the same on a T4), as many blocks as fit on the GPU at once (fewer: fewer partial rows).
template <typename T, int kVec, int kPacks>
bool plan_rows(BackwardPlan& plan, int64_t M, int N, bool vec) {
  if (N % kVec != 0) return false;
  const int threads = row_threads(N / kVec, kPacks);
  if (threads == 0 || threads > kMaxThreads<T>) return false;
  int64_t rows = kMaxThreads<T> / threads;
  const int64_t fit = (48 * 1024) / (int64_t(N) * int64_t(sizeof(Acc<T>)));
  rows = rows < fit ? rows : fit;
  rows = rows < M ? rows : M;
  if (rows < 1) return false;
  const size_t smem = rows > 1 ? size_t(rows) * N * sizeof(Acc<T>) : 0;
  const int per_sm = norm_engine::blocks_per_sm(
      reinterpret_cast<const void*>(backward_kernel<T, kVec, kPacks>), threads * int(rows), smem);
  if (per_sm == 0) return false;
  const int64_t want = ceil_div<int64_t>(M, rows), cap = int64_t(per_sm) * num_sms();
  plan.ok = true;
  plan.vec = vec;
  plan.packs = kPacks;
  plan.block = dim3(unsigned(threads), unsigned(rows));
  plan.blocks = int(want < cap ? want : cap);
  plan.smem = smem;
  return true;
}

// 8 values of x and of grad_y a thread (16 would spill: with the column sums that is 48 registers of data);
// none (backward v1) for longer rows.
template <typename T>
BackwardPlan plan_backward(const T* dy, const T* x, const T* w, const T* dx, int64_t M, int N) {
  constexpr int V = kPack16<T>, P8 = 8 / V > 0 ? 8 / V : 1;
  BackwardPlan plan;
  if (vectorizable<T>(N, {dy, x, w, dx}))
    plan_rows<T, V, P8>(plan, M, N, true);
  else
    plan_rows<T, 1, 8>(plan, M, N, false);
  return plan;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Launcher. The .cpp guarantees M > 0, 0 < N < 2^31, and that every pointer is on the current device.
// ------------------------------------------------------------------------------------------------

// 16 values per thread, else 32 (not for double), else one block per row (RMSNorm forward v2's choices
// without clusters).
template <typename T>
void rms_norm_dropout_forward_v1(const T* x, const T* weight, T* y, Acc<T>* rstd, int64_t M, int N,
                                 Acc<T> eps, philox::RngState rng, uint64_t threshold, Acc<T> scale,
                                 int64_t* state_out, cudaStream_t stream) {
  constexpr int V = kPack16<T>, P16 = 16 / V > 0 ? 16 / V : 1;
  const auto args = [&](auto launch) {
    return launch(x, weight, y, rstd, M, N, eps, rng, threshold, scale, state_out, stream);
  };
  if (vectorizable<T>(N, {x, weight, y})) {
    if (args(launch_rows<T, V, P16>)) return;
    if constexpr (sizeof(T) < 8)  // 32 doubles a thread spill even at 128 registers
      if (args(launch_rows<T, V, 2 * P16>)) return;
    args(launch_long<T, V>);
  } else {
    if (args(launch_rows<T, 1, 16>)) return;
    args(launch_long<T, 1>);
  }
}

template <typename T>
int64_t rms_norm_dropout_backward_v2_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                               int64_t M, int N) {
  const BackwardPlan plan = plan_backward<T>(grad_y, x, weight, grad_x, M, N);
  return plan.ok ? int64_t(plan.blocks) * N : 0;
}

template <typename T, typename P>
bool rms_norm_dropout_backward_v2(const T* grad_y, const T* x, const Acc<T>* rstd, const T* weight, T* grad_x,
                                  P* grad_weight, Acc<T>* workspace, int64_t M, int N, philox::RngState rng,
                                  uint64_t threshold, Acc<T> scale, cudaStream_t stream) {
  constexpr int V = kPack16<T>, P8 = 8 / V > 0 ? 8 / V : 1;
  const BackwardPlan plan = plan_backward<T>(grad_y, x, weight, grad_x, M, N);
  if (!plan.ok) return false;
  const auto go = [&](auto kernel) {
    kernel<<<plan.blocks, plan.block, plan.smem, stream>>>(grad_y, x, rstd, weight, grad_x, workspace, M, N,
                                                           rng, threshold, scale);
  };
  if (plan.vec)
    go(backward_kernel<T, V, P8>);
  else
    go(backward_kernel<T, 1, 8>);
  COURSE_LAUNCH_CHECK();
  sum_partials_kernel<T, P>
      <<<unsigned(ceil_div(N, 256)), 256, 0, stream>>>(workspace, plan.blocks, N, grad_weight);
  COURSE_LAUNCH_CHECK();
  return true;
}

#define INSTANTIATE(T)                                                                                      \
  template void rms_norm_dropout_forward_v1<T>(const T*, const T*, T*, Acc<T>*, int64_t, int, Acc<T>,       \
                                               philox::RngState, uint64_t, Acc<T>, int64_t*, cudaStream_t); \
  template int64_t rms_norm_dropout_backward_v2_workspace<T>(const T*, const T*, const T*, const T*,        \
                                                             int64_t, int);
#define INSTANTIATE_BACKWARD(T, P)                                                                      \
  template bool rms_norm_dropout_backward_v2<T, P>(const T*, const T*, const Acc<T>*, const T*, T*, P*, \
                                                   Acc<T>*, int64_t, int, philox::RngState, uint64_t,   \
                                                   Acc<T>, cudaStream_t);
COURSE_FOR_EACH_DTYPE(INSTANTIATE)
COURSE_FOR_EACH_PARAM_PAIR(INSTANTIATE_BACKWARD)
