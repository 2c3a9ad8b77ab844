// kernels/layernorm.cu: LayerNorm over the last dimension, forward and backward (lesson 03).
//
//   y = (x - mean) * rstd * weight + bias,   rstd = 1 / sqrt(mean((x - mean)^2) + eps),  per row of N.
//
// A norm reads x and writes y once (2*M*N elements forward), and reads x and grad_y and writes grad_x
// once (3*M*N backward); anything more is wasted bandwidth, so the speed limit is a copy of the same
// bytes. The versions, in the order lesson 03 builds them (numbers never change):
//
//   forward v1   one thread per row, three passes over the row (sum, squared deviations, output).
//                Simple, but neighbouring threads read addresses N elements apart: no load is coalesced,
//                and an [M, N] input gives only M threads.
//   forward v2   one warp per row: lane l reads elements l, l + 32, ... (32 neighbours = one coalesced
//                transaction) and the 32 partial sums meet through warp shuffles, no shared memory. Still
//                two-byte loads for bf16, and the row is read three times (L1/L2 catch the rereads).
//   forward v3   16-byte loads (Pack: 4 floats, 8 bf16) and the row held in registers: x is read from
//                memory exactly once. A row group of 1 to 32 warps owns a row, 64 bytes per thread (32
//                for bf16/half while the row fits: 16 values per thread either way), so rows up to 16384
//                floats (32768 bf16) stay on chip; mean first, then the squared deviations (two-pass)
//                from the registers. Longer rows take a block-per-row path with Welford's one-pass
//                statistics and a second read of the row from L2. Unaligned pointers or N not a multiple
//                of the pack width use the same kernels with one value per pack.
//   forward v3, config 3 (sm_90+, half and bf16; the default there when the grid does at most 4 rounds):
//                the same row groups, but a persistent grid whose threads copy their share of the next row
//                into shared memory (cp.async) before they reduce the current one, so every block always
//                has a row in flight: twice the bytes in flight per SM at the same 32 registers. bf16
//                4096x4096 on the H100: 88% -> 94% of copy. With many rounds (32768x1024) the static
//                split of the rows is slower than the block scheduler's balancing, so there config 0
//                keeps the one-row-per-block kernel.
//   backward v1  one warp per row for grad_x (two passes), and a separate kernel with one thread per
//                column summing grad_weight and grad_bias over all rows: reads x and grad_y twice.
//   backward v2  one pass: a persistent grid (about one block of up to 1024 threads per SM) strides over
//                the rows; each row group holds its row of x and grad_y in registers (16-byte Packs, 32
//                bytes of each per thread, 16 for bf16/half while the row fits, the next row already in
//                flight while this one is computed), writes grad_x, and adds dy * xhat and dy to its own
//                column sums in shared memory. Each block writes one row of partial sums into a [blocks,
//                N] buffer, and a wide second kernel (16-byte loads, 1024 threads per 128 columns) adds
//                those rows in a fixed order: no atomics, the same bits on every run. Memory traffic is
//                x, grad_y, grad_x, plus blocks * N * 8 bytes of partial sums. Rows longer than the
//                registers hold (8192 floats, 16384 bf16) read the row twice and sum the columns in a
//                separate kernel.
//                float32 alternates two row buffers instead of copying the next row into the current one
//                (two rows in flight per group while one is waited for; see the kernel).
//   backward v2, config 3 and 4 (float, half, bf16; config 3 is the default):
//                the same row loop, but the kernel finishes grad_weight and grad_bias itself. It is
//                launched cooperatively (every block resident at once); each block writes its partial row,
//                cooperative_groups' grid.sync() (the driver's own barrier counter: nothing to zero, safe
//                on any stream), and then all blocks split the 2N column sums, each added over the blocks
//                in a fixed order (finish_column_sums): bit-for-bit deterministic, no float atomics. Why
//                faster: no second launch and no short, nearly idle sum_partials_kernel at the end (a few
//                us of a 45 us backward at bf16 4096x4096), the partial rows are read back from L2 by the
//                whole GPU at once; and the grid is sized to whole rounds (4096 rows in pairs: 128 blocks
//                x 16, not 132 x 15.5, whose last half-round ran at half the SMs, ~3% at all three
//                benchmark shapes), which also means fewer partial rows. Config 4 also loads two rows
//                ahead instead of one for 2-byte types at 16 bytes per thread (N <= 4096): 64 bytes in
//                flight per thread, as float has, for the same 8 values of work per thread.
//   backward v2, config 6 (sm_90+; the default for half and bf16 there, float keeps config 3): config 3
//                with the rows brought into shared memory by the Tensor Memory Accelerator's bulk copy
//                (cp.async.bulk + mbarrier), a ring of 4 round buffers: three rounds in flight per SM
//                instead of one row per thread. bf16 on the H100: 75/81/84% -> 78-80/82/87% of copy
//                (4096x4096, 32768x1024, 8192x8192); then its partial row written without shared-memory
//                bank conflicts (the ending 7.0 -> 5.1 us at 4096x4096): 78-82/85-88/88-92%. See
//                backward_v2_bulk_kernel for why the register loop cannot keep more than one row in flight.
//                What is left at 4096x4096 (~48 us): the first round's data lands ~3.3 us in, the ending
//                takes ~5 us, and the blocks' loops end 6-7 us apart (the same SMs are late call after
//                call). Measured and not kept (results/h100/layernorm_backward_experiments.md): work
//                stealing that keeps the column sums deterministic (slower: at 1024 threads a thread has
//                64 registers and this loop uses 63, so the extra state spills); rounds claimed from a
//                counter (balanced but not bit-reproducible: +2-3% at the larger shapes, nothing at
//                4096x4096); an ending without grid.sync (arrival counters per group of blocks: 1.5-3 us
//                slower).
//   backward v2, config 7 (the default for half and bf16 on sm_90+): config 6 with the last round peeled:
//                its column sums are added first, the block's partial row written and the grid barrier
//                arrived at (cooperative_groups' split barrier_arrive/barrier_wait), and only then that
//                round's grad_x computed and stored, so the barrier's latency hides behind it. bf16 on
//                the H100: 48.6 -> 48.1 us at 4096x4096, 83.2 -> 82.4 us at 32768x1024, same run.
//
// Everything is computed in Acc<T> (float, double for double inputs) and stored as T.
#include <cooperative_groups.h>

#include <initializer_list>
#include <type_traits>

#include "layernorm.h"

namespace {

// Bytes of the row each thread holds in registers. 2-byte types take half: the same number of values
// per thread as float (16 forward, 8 of x and 8 of grad_y backward), so the same registers, arithmetic
// and conversions per thread and twice the threads per row, rather than twice the work per thread for
// the same bytes (which left bf16 ~10-20% behind fp32). Rows too long for that fall back to the full
// width. `config` (benchmarks/tuning/layernorm.py) picks other widths for 2-byte types to compare.
constexpr int kFwdBytes = 64;  // forward v3
constexpr int kBwdBytes = 32;  // backward v2: of x, and of grad_y, per row
constexpr int kBigThreads = 512;

__device__ __forceinline__ float rsqrt_acc(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_acc(double v) { return rsqrt(v); }

// N values of T kept as raw 32-bit words. A Pack<__nv_bfloat16, 8> held across a loop gets split by the
// compiler into eight 16-bit registers; as four words it takes four, which is what lets backward v2 keep
// two rows of x and grad_y in registers. Loads are one instruction of the full width (16 bytes for a Pack).
template <typename T, int N>
struct Raw {
  static constexpr int kBytes = N * int(sizeof(T));
  uint32_t w[kBytes < 4 ? 1 : kBytes / 4];
  __device__ __forceinline__ void load(const T* p) {
    if constexpr (kBytes == 16) {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    } else if constexpr (kBytes == 8) {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      w[0] = u.x, w[1] = u.y;
    } else if constexpr (kBytes == 4) {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    } else {
      w[0] = *reinterpret_cast<const unsigned short*>(p);
    }
  }
  __device__ __forceinline__ Acc<T> operator[](int k) const {  // value k, converted to Acc<T>
    if constexpr (std::is_same_v<T, float>) {
      return __uint_as_float(w[k]);
    } else if constexpr (std::is_same_v<T, double>) {
      return __hiloint2double(int(w[2 * k + 1]), int(w[2 * k]));
    } else {
      const uint32_t bits = k % 2 ? w[k / 2] >> 16 : w[k / 2] & 0xffffu;
      if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(bits << 16);
      return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
    }
  }
};

// kVec Acc<T> values rounded to T and packed for one store; bf16 and half round two at a time
// (one cvt.rn.bf16x2.f32 instead of two conversions and a permute).
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> to_pack(const Acc<T> (&v)[kVec]) {
  Pack<T, kVec> out;
  if constexpr (kVec % 2 == 0 && std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int k = 0; k < kVec; k += 2)
      reinterpret_cast<__nv_bfloat162*>(out.v)[k / 2] = __floats2bfloat162_rn(v[k], v[k + 1]);
  } else if constexpr (kVec % 2 == 0 && std::is_same_v<T, __half>) {
#pragma unroll
    for (int k = 0; k < kVec; k += 2)
      reinterpret_cast<__half2*>(out.v)[k / 2] = __floats2half2_rn(v[k], v[k + 1]);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = from_acc<T>(v[k]);
  }
  return out;
}

// Every lane gets the sum over the warp (the same butterfly as the exercise; versions other than v2 use
// this copy, so an unfinished exercise breaks only forward v2).
template <typename acc_t>
__device__ __forceinline__ acc_t lane_sum(acc_t v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Sums K values over one row group: the blockDim.x threads with the same threadIdx.y. Every thread of
// the group gets the totals. Shuffles within each warp, then one value per warp through `buf`
// (32 * K values); every warp adds those up in the same order, so all get the same bits, on every run.
// Alternate two buffers between calls: then one __syncthreads per call is enough.
template <int K, typename acc_t>
__device__ __forceinline__ void group_sum(acc_t (&v)[K], acc_t* buf) {
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = lane_sum(v[k]);
  const int warps = blockDim.x / 32;
  if (warps == 1) return;
  acc_t* mine = buf + threadIdx.y * warps * K;
  const int lane = threadIdx.x % 32;
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) mine[threadIdx.x / 32 * K + k] = v[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = lane_sum(lane < warps ? mine[lane * K + k] : acc_t(0));
}

// ------------------------------------------------------------------------------------------------
// Forward
// ------------------------------------------------------------------------------------------------

// v1: thread i owns row i and walks it three times.
template <typename T>
__global__ void forward_v1_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                  T* __restrict__ y, Acc<T>* __restrict__ mean, Acc<T>* __restrict__ rstd,
                                  int64_t M, int N, Acc<T> eps) {
  using acc_t = Acc<T>;
  const int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (row >= M) return;
  const T* xr = x + row * N;
  T* yr = y + row * N;
  acc_t sum = 0;
  for (int j = 0; j < N; ++j) sum += to_acc(xr[j]);
  const acc_t mu = sum / N;
  acc_t sq = 0;
  for (int j = 0; j < N; ++j) {
    const acc_t d = to_acc(xr[j]) - mu;
    sq += d * d;
  }
  const acc_t rs = rsqrt_acc(sq / N + eps);
  for (int j = 0; j < N; ++j) yr[j] = from_acc<T>((to_acc(xr[j]) - mu) * rs * to_acc(w[j]) + to_acc(b[j]));
  mean[row] = mu;
  rstd[row] = rs;
}

// v2: one warp per row, in kernels/layernorm.exercises.cu (it runs the exercise's warp_sum).

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

// v3: each row group loads its row once, straight from global memory into registers.
template <typename T, int kVec, int kPacks>
__global__ __launch_bounds__(1024) void forward_v3_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                          const T* __restrict__ b, T* __restrict__ y,
                                                          Acc<T>* __restrict__ mean,
                                                          Acc<T>* __restrict__ rstd, int64_t M, int N,
                                                          Acc<T> eps) {
  __shared__ Acc<T> buf[2][32];
  const int64_t row = blockIdx.x * int64_t(blockDim.y) + threadIdx.y;
  const bool active = row < M;  // inactive groups still join the __syncthreads of group_sum
  Raw<T, kVec> v[kPacks];
  const Acc<T> sum = load_row(v, x + row * N, N, active);
  normalize_row<T, kVec, kPacks>(v, sum, w, b, y, mean, rstd, row, N, eps, active, buf);
}

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

// v3, config 3 (the default for half and bf16 on sm_90+ where it does at most 4 rounds): the same row
// groups and arithmetic, but each block keeps its rows coming. A persistent grid (as many blocks as fit at
// once, sized to equal rounds) walks the rows, and each thread copies its share of the next row into
// shared memory (cp.async: no registers held while it is in flight) before it reduces the current one.
// Why: in forward_v3_kernel a block has nothing in flight from the moment its row lands until it ends
// (two reductions, weight and bias, the store), and registers cap it at one row per block: 8 blocks of 256
// threads at 32 registers hold at most 64 KB per SM. Here each block has its next row on the way too:
// 128 KB per SM at the same 32 registers (held to them by __launch_bounds__: 8 blocks per SM). On the H100
// at bf16 4096x4096 (4 rounds): 31.0 -> 29.1 us, 88% -> 94% of copy, same run. With many rounds the static
// split loses to the block scheduler's balancing (32768x1024, 8 rounds: 51.4 -> 56.1 us; some SMs get
// less bandwidth than others, and here every block must finish its share), so it is not used there.
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

// Welford's running mean and sum of squared deviations (m2), and Chan's rule to merge two of them:
// one pass over the data, and no cancellation (unlike sum(x^2) - n * mean^2).
template <typename acc_t>
struct Welford {
  acc_t mean = 0, m2 = 0, n = 0;
  __device__ void add(acc_t v) {
    n += 1;
    const acc_t d = v - mean;
    mean += d / n;
    m2 += d * (v - mean);
  }
  __device__ void merge(acc_t o_mean, acc_t o_m2, acc_t o_n) {
    const acc_t total = n + o_n;
    if (o_n == 0) return;
    const acc_t d = o_mean - mean, f = o_n / total;
    mean += d * f;
    m2 += o_m2 + d * d * n * f;
    n = total;
  }
};

// v3 for rows too long for registers: one block per row, Welford per thread, merged down a tree
// (shfl_down, then warp 0 over the warps' results: a fixed order), then a second read of the row for
// the output, which hits L2 (the row was just read).
template <typename T, int kVec>
__global__ __launch_bounds__(kBigThreads) void forward_v3_long_kernel(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
    Acc<T>* __restrict__ mean, Acc<T>* __restrict__ rstd, int N, Acc<T> eps) {
  using acc_t = Acc<T>;
  using P = Pack<T, kVec>;
  __shared__ acc_t part[3][32];
  __shared__ acc_t stats[2];
  const int64_t row = blockIdx.x;
  const int packs = N / kVec, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const P* xr = reinterpret_cast<const P*>(x + row * N);
  Welford<acc_t> st;
  for (int c = threadIdx.x; c < packs; c += blockDim.x) {
    const P in = xr[c];
#pragma unroll
    for (int k = 0; k < kVec; ++k) st.add(to_acc(in.v[k]));
  }
  for (int off = 16; off > 0; off /= 2) {
    const acc_t m = __shfl_down_sync(0xffffffffu, st.mean, off);
    const acc_t m2 = __shfl_down_sync(0xffffffffu, st.m2, off);
    const acc_t n = __shfl_down_sync(0xffffffffu, st.n, off);
    st.merge(m, m2, n);
  }
  if (lane == 0) {
    part[0][warp] = st.mean;
    part[1][warp] = st.m2;
    part[2][warp] = st.n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    Welford<acc_t> all;
    for (int i = 0; i < int(blockDim.x / 32); ++i) all.merge(part[0][i], part[1][i], part[2][i]);
    stats[0] = all.mean;
    stats[1] = rsqrt_acc(all.m2 / N + eps);
    mean[row] = stats[0];
    rstd[row] = stats[1];
  }
  __syncthreads();
  const acc_t mu = stats[0], rs = stats[1];
  const P* wp = reinterpret_cast<const P*>(w);
  const P* bp = reinterpret_cast<const P*>(b);
  P* yr = reinterpret_cast<P*>(y + row * N);
  for (int c = threadIdx.x; c < packs; c += blockDim.x) {
    const P in = xr[c], wv = wp[c], bv = bp[c];
    P out;
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      out.v[k] = from_acc<T>((to_acc(in.v[k]) - mu) * rs * to_acc(wv.v[k]) + to_acc(bv.v[k]));
    yr[c] = out;
  }
}

// ------------------------------------------------------------------------------------------------
// Backward. With xhat = (x - mean) * rstd and g = grad_y * weight, per row:
//   grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)),  and over the rows
//   grad_weight = sum(grad_y * xhat),  grad_bias = sum(grad_y).
// ------------------------------------------------------------------------------------------------

// v1 grad_x: one warp per row, in kernels/layernorm.exercises.cu (it runs the exercise's
// layernorm_backward_row_warp).

// v1 grad_weight, grad_bias: thread j walks column j down all M rows (neighbouring threads read
// neighbouring columns, so the loads are coalesced).
template <typename T>
__global__ void backward_v1_dwdb_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                        const Acc<T>* __restrict__ mean, const Acc<T>* __restrict__ rstd,
                                        T* __restrict__ dw, T* __restrict__ db, int64_t M, int N) {
  using acc_t = Acc<T>;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= N) return;
  acc_t sw = 0, sb = 0;
  for (int64_t r = 0; r < M; ++r) {
    const acc_t g = to_acc(dy[r * N + j]);
    sw += g * (to_acc(x[r * N + j]) - mean[r]) * rstd[r];
    sb += g;
  }
  dw[j] = from_acc<T>(sw);
  db[j] = from_acc<T>(sb);
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

// The end of a fused backward v2 (config 3, 4): grad_weight and grad_bias from the [2][G][N] partial
// sums of the G = gridDim.x blocks, inside the same kernel (common.h's add_columns_in_order: 2N columns,
// grad_weight's then grad_bias's, each added over the G blocks in a fixed order).
template <typename acc_t, typename T>
__device__ __forceinline__ void finish_column_sums(const acc_t* partials, int N, T* __restrict__ dw,
                                                   T* __restrict__ db, acc_t* scratch) {
  const int G = gridDim.x;
  const auto start = [&](int64_t q) { return q < N ? partials + q : partials + int64_t(G) * N + (q - N); };
  const auto store = [&](int64_t q, acc_t v) {
    if (q < N)
      dw[q] = from_acc<T>(v);
    else
      db[q - N] = from_acc<T>(v);
  };
  add_columns_in_order(2 * int64_t(N), blockIdx.x, G, G, N, start, store, scratch);
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

// v2: persistent row groups. Block b, group r takes rows b*R + r, then + gridDim.x * R, ...; the
// loads of the next row are issued before the current row's math, so memory stays busy through the
// reductions. Shared memory: two reduction buffers, then per group [grad_weight sums | grad_bias sums]
// (N each), each column owned by the thread that owns it in the row: no conflicts, no atomics.
template <typename T, int kVec, int kPacks, int kDepth, bool kFuse>
__global__ __launch_bounds__(1024) void backward_v2_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                           const Acc<T>* __restrict__ mean,
                                                           const Acc<T>* __restrict__ rstd,
                                                           const T* __restrict__ w, T* __restrict__ dx,
                                                           Acc<T>* __restrict__ partials, T* __restrict__ dw,
                                                           T* __restrict__ db, int64_t M, int N) {
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

  // weight is read again for every row (L1 hits), which leaves the registers to x and grad_y.
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int c = threadIdx.x + p * blockDim.x;
    if (c < packs) {
#pragma unroll
      for (int k = 0; k < kVec; k += C) {
        reinterpret_cast<A*>(acc_w + c * kVec + k)[0] = A{};
        reinterpret_cast<A*>(acc_b + c * kVec + k)[0] = A{};
      }
    }
  }

  const int64_t step = int64_t(gridDim.x) * R;
  int64_t row = blockIdx.x * int64_t(R) + threadIdx.y;
  // One row: its two sums over the group, then grad_x and this group's column sums. `cur` holds the
  // row's x and grad_y; the whole block calls it together (group_sum synchronizes the block).
  const auto process = [&](const Row<T, kVec, kPacks>& cur, int64_t row, int parity) {
    acc_t s[2] = {0, 0};  // sum of g, sum of g * xhat
    if (row < M) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int c = threadIdx.x + p * blockDim.x;
        if (c < packs) {
          Raw<T, kVec> wv;
          wv.load(w + c * kVec);
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            const acc_t g = cur.g[p][k] * wv[k];
            s[0] += g;
            s[1] += g * (cur.x[p][k] - cur.mean) * cur.rstd;
          }
        }
      }
    }
    group_sum(s, red + parity * 64);
    if (row < M) {
      const acc_t mg = s[0] * inv_n, mgx = s[1] * inv_n;
      P* dxr = reinterpret_cast<P*>(dx + row * N);
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int c = threadIdx.x + p * blockDim.x;
        if (c < packs) {
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
              out[k0 + k] = cur.rstd * (g - mg - xh * mgx);
              aw.v[k] += dyv * xh;
              ab.v[k] += dyv;
            }
            reinterpret_cast<A*>(acc_w + c * kVec + k0)[0] = aw;
            reinterpret_cast<A*>(acc_b + c * kVec + k0)[0] = ab;
          }
          dxr[c] = to_pack<T>(out);
        }
      }
    }
  };
  if constexpr (kDepth == 1 && sizeof(T) == 4) {
    // Two rows in registers, used in turn (no copy of one into the other): the load of row + 2 * step
    // is issued as soon as `a` is done, before waiting for `b`, so two rows of each group are in
    // flight while one is waited for. (Moving a just-loaded row from one variable to another, as the
    // loop below does, makes the thread wait for that load before it can issue the next one.) On the
    // H100 this took float32 from 85/91/86% to 88/93/93% of copy (4096x4096, 32768x1024, 8192x8192),
    // but bfloat16 at 4096x4096 from 76% to 59%, so 2-byte types keep the loop below.
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
    Row<T, kVec, kPacks> ahead[kDepth];  // ahead[d]: row + d * step (ahead[0] is the row computed now)
#pragma unroll
    for (int d = 0; d < kDepth; ++d)
      if (row + d * step < M) ahead[d].load(x, dy, mean, rstd, row + d * step, N);
    int parity = 0;
    for (int64_t first = blockIdx.x * int64_t(R); first < M; first += step, row += step, parity ^= 1) {
      Row<T, kVec, kPacks> next;
      if (row + kDepth * step < M) next.load(x, dy, mean, rstd, row + kDepth * step, N);
      process(ahead[0], row, parity);
#pragma unroll
      for (int d = 0; d + 1 < kDepth; ++d) ahead[d] = ahead[d + 1];
      ahead[kDepth - 1] = next;
    }
  }
  __syncthreads();
  acc_t* acc = red + 2 * 32 * 2;
  write_partial_row(acc, N, partials);
  if constexpr (kFuse) {
    // Every block's partial row is written once all have arrived here (a cooperative launch: the whole
    // grid is resident, and grid.sync fences memory); then the blocks split the column sums.
    cooperative_groups::this_grid().sync();
    finish_column_sums(partials, N, dw, db, acc);
  }
}

// v2, config 6 (sm_90 and newer; the default for half and bf16 there): the same rows, blocks and
// column sums as config 3, but the rows arrive by the Tensor Memory Accelerator's bulk copy
// (cp.async.bulk) into a ring of 4 shared-memory buffers, one round of the block's R rows (x and grad_y,
// R * N contiguous values each, 16 KB apiece at 4096 bf16 columns) per buffer, while the threads work
// on an earlier round. Why: in the register loop every thread has one row in flight, and ptxas counts
// all of a thread's global loads on one scoreboard, so a thread waiting for row k also waits for any
// later row it has already asked for (the SASS shows it: two rows in flight made bf16 slower, 59% of
// copy). A bulk copy is one instruction per round, counted by its own mbarrier (a shared-memory counter
// of bytes still to arrive), so up to three rounds are in flight per SM whatever the threads are doing.
// One thread issues the copies; lanes 0..R-1 of warp 0 fetch the rows' mean and rstd with cp.async,
// which arrives on the same mbarrier. x and grad_y are read from shared memory in both passes, and the
// column sums live in registers; the end is config 3's (a partial row per block, grid.sync, fixed-order
// sums), with the partial row added from the groups' registers.
// On the H100 it took bf16 from 75/81/84% to 78-80/82/87% of copy (4096x4096, 32768x1024, 8192x8192),
// 78-82/85-88/88-92% with the conflict-free partial row; float32 is not faster with it (86.8-88.8% either
// way at 4096x4096, 90.6-91.8% against 92.9-93.3% at 32768x1024), so float keeps config 3.
namespace bulk {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also announces `bytes` of bulk copies to come on this barrier's current phase.
__device__ __forceinline__ void arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile(
      "{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(smem_addr(bar)),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void arrive(uint64_t* bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(smem_addr(bar))
               : "memory");
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory.
__device__ __forceinline__ void copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
// 4 bytes by cp.async; the barrier gets this thread's arrival once its earlier cp.asyncs have landed.
__device__ __forceinline__ void copy4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void arrive_after_copies(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
}
#endif
}  // namespace bulk

constexpr int kBulkBuffers = 4;  // rounds in flight: 3 (measured on the H100: 3 and 6 buffers were slower)

// Shared memory of backward_v2_bulk_kernel: [reduction buffers | mbarriers | mean, rstd | row buffers].
template <typename T>
struct BulkLayout {
  int R, N;
  bool early = false;  // kEarly: room to add the groups' column sums while a round is still in the ring
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
  __host__ __device__ size_t exchange() const { return total(); }  // kEarly: [R - 1][2][N] column sums
  __host__ __device__ size_t total_bytes() const {
    return total() + (early ? 2 * size_t(R - 1) * N * sizeof(Acc<T>) : 0);
  }
};

// kEarly (config 7): the last round peeled: its column sums are added and the block's partial row written
// first, the grid barrier is arrived at, and the round's grad_x is computed while the other blocks arrive.
// (Weight is then also loaded before the first bulk copies are issued rather than after: measured neutral.)
template <typename T, int kVec, bool kEarly = false>
__global__ __launch_bounds__(1024) void backward_v2_bulk_kernel(
    const T* __restrict__ dy, const T* __restrict__ x, const Acc<T>* __restrict__ mean,
    const Acc<T>* __restrict__ rstd, const T* __restrict__ w, T* __restrict__ dx,
    Acc<T>* __restrict__ partials, T* __restrict__ dw, T* __restrict__ db, int64_t M, int N) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using acc_t = Acc<T>;
  static_assert(sizeof(acc_t) == 4, "float, half and bf16 only");
  constexpr int B = kBulkBuffers;
  extern __shared__ float4 smem_[];
  char* base = reinterpret_cast<char*>(smem_);
  const int R = blockDim.y, packs = N / kVec, c = threadIdx.x;
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
        bulk::copy4(stats + s * 2 * R + threadIdx.x, mean + first + threadIdx.x);
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
      mu = stats[s * 2 * R + threadIdx.y];
      rs = stats[s * 2 * R + R + threadIdx.y];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t g = gv[j] * wv[j];
        sums[0] += g;
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
      const acc_t mg = sums[0] * inv_n, mgx = sums[1] * inv_n;
      acc_t out[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t d = gv[j], xh = (xv[j] - mu) * rs;
        out[j] = rs * (d * wv[j] - mg - xh * mgx);
        aw[j] += d * xh;
        ab[j] += d;
      }
      reinterpret_cast<Pack<T, kVec>*>(dx + row * N)[c] = to_pack<T>(out);
    }
    if (++s == B) s = 0, parity ^= 1;
  }
  static_assert(kVec % 4 == 0, "whole float4s of column sums");
  const auto put4 = [](float4* to, const acc_t* v) { *to = make_float4(v[0], v[1], v[2], v[3]); };
  const auto add4 = [](acc_t* v, float4 a) { v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w; };
  // Group 0 adds the other groups' column sums (left in `from` as [R - 1][2][N]) to its own in group
  // order and writes the block's row of partial sums, all in 16-byte accesses.
  const auto write_row = [&](const acc_t* from) {
    if (threadIdx.y == 0 && c < packs) {
      for (int r = 1; r < R; ++r) {
        const float4* f = reinterpret_cast<const float4*>(from + (r - 1) * 2 * N + c * kVec);
#pragma unroll
        for (int j = 0; j < kVec; j += 4) add4(aw + j, f[j / 4]), add4(ab + j, f[(N + j) / 4]);
      }
      float4* pw = reinterpret_cast<float4*>(partials + blockIdx.x * int64_t(N) + c * kVec);
      float4* pb = reinterpret_cast<float4*>(partials + (gridDim.x + blockIdx.x) * int64_t(N) + c * kVec);
#pragma unroll
      for (int j = 0; j < kVec; j += 4) put4(pw + j / 4, aw + j), put4(pb + j / 4, ab + j);
    }
  };
  const auto leave_sums = [&](acc_t* to) {  // groups 1..R-1
    if (threadIdx.y > 0 && c < packs) {
      float4* t = reinterpret_cast<float4*>(to + (threadIdx.y - 1) * 2 * N + c * kVec);
#pragma unroll
      for (int j = 0; j < kVec; j += 4) put4(t + j / 4, aw + j), put4(t + (N + j) / 4, ab + j);
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
      mu = stats[s * 2 * R + threadIdx.y];
      rs = stats[s * 2 * R + R + threadIdx.y];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t d = gv[j], g = d * wv[j], xh = (xv[j] - mu) * rs;
        sums[0] += g;
        sums[1] += g * (xv[j] - mu) * rs;
        aw[j] += d * xh;
        ab[j] += d;
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
      const acc_t mg = sums[0] * inv_n, mgx = sums[1] * inv_n;
      acc_t out[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t d = gv[j], xh = (xv[j] - mu) * rs;
        out[j] = rs * (d * wv[j] - mg - xh * mgx);
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
    // bf16): that version spent ~2 us of a 49 us backward at bf16 4096x4096 here (measured on the H100:
    // the ending, partial row to grad_weight/grad_bias, took 7.0 us, now 5.1).
    if (R > 1) {
      __syncthreads();
      leave_sums(acc);
      __syncthreads();
    }
    write_row(acc);
    cooperative_groups::this_grid().sync();
  }
  finish_column_sums(partials, N, dw, db, acc);
#else
  __trap();  // never launched: the host checks that this kernel was built for sm_90 or newer
#endif
}

// v2 for rows too long for registers: grad_x with one block per row and two reads of the row (the
// second from L2); the column sums by column_partials_kernel below.
template <typename T, int kVec>
__global__ __launch_bounds__(kBigThreads) void backward_v2_long_dx_kernel(
    const T* __restrict__ dy, const T* __restrict__ x, const Acc<T>* __restrict__ mean,
    const Acc<T>* __restrict__ rstd, const T* __restrict__ w, T* __restrict__ dx, int N) {
  using acc_t = Acc<T>;
  using P = Pack<T, kVec>;
  __shared__ acc_t buf[32 * 2];
  const int64_t row = blockIdx.x;
  const int packs = N / kVec;
  const acc_t mu = mean[row], rs = rstd[row];
  const P *xr = reinterpret_cast<const P*>(x + row * N), *gr = reinterpret_cast<const P*>(dy + row * N);
  const P* wp = reinterpret_cast<const P*>(w);
  acc_t s[2] = {0, 0};
  for (int c = threadIdx.x; c < packs; c += blockDim.x) {
    const P xv = xr[c], gv = gr[c], wv = wp[c];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const acc_t g = to_acc(gv.v[k]) * to_acc(wv.v[k]);
      s[0] += g;
      s[1] += g * (to_acc(xv.v[k]) - mu) * rs;
    }
  }
  group_sum(s, buf);
  const acc_t mg = s[0] / N, mgx = s[1] / N;
  P* dxr = reinterpret_cast<P*>(dx + row * N);
  for (int c = threadIdx.x; c < packs; c += blockDim.x) {
    const P xv = xr[c], gv = gr[c], wv = wp[c];
    P out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const acc_t g = to_acc(gv.v[k]) * to_acc(wv.v[k]);
      out.v[k] = from_acc<T>(rs * (g - mg - (to_acc(xv.v[k]) - mu) * rs * mgx));
    }
    dxr[c] = out;
  }
}

// Column sums for slice blockIdx.y of the rows: thread j adds column j over its slice's rows, into
// row blockIdx.y of the partial sums ([2][gridDim.y][N]: grad_weight's, then grad_bias's).
template <typename T>
__global__ void column_partials_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                       const Acc<T>* __restrict__ mean, const Acc<T>* __restrict__ rstd,
                                       Acc<T>* __restrict__ partials, int64_t M, int N,
                                       int64_t rows_per_slice) {
  using acc_t = Acc<T>;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= N) return;
  const int64_t r0 = blockIdx.y * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < M ? r0 + rows_per_slice : M;
  acc_t sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const acc_t g = to_acc(dy[r * N + j]);
    sw += g * (to_acc(x[r * N + j]) - mean[r]) * rstd[r];
    sb += g;
  }
  partials[blockIdx.y * int64_t(N) + j] = sw;
  partials[(gridDim.y + blockIdx.y) * int64_t(N) + j] = sb;
}

// grad_weight (blockIdx.y == 0) or grad_bias (1) = the sum over the G partial rows. Block (32, 32):
// thread x owns C adjacent columns (one 16-byte load per partial row, 512 contiguous bytes per warp),
// and thread y adds rows y, y + 32, y + 64, ... in order; then the 32 sums of each column are added in
// order 0..31 through shared memory. A fixed order: the same bits on every run. Wide enough that
// thousands of loads are in flight, so it costs little more than a read of the [2, G, N] buffer.
template <typename T, int C>
__global__ __launch_bounds__(1024) void sum_partials_kernel(const Acc<T>* __restrict__ partials, int G, int N,
                                                            T* __restrict__ dw, T* __restrict__ db) {
  using acc_t = Acc<T>;
  using A = Pack<acc_t, C>;
  __shared__ acc_t part[32][32 * C];
  const int j0 = blockIdx.x * 32 * C, j = j0 + threadIdx.x * C;
  const acc_t* src = partials + int64_t(blockIdx.y) * G * N;
  acc_t s[C] = {};
  if (j < N)
    for (int g = threadIdx.y; g < G; g += 32) {
      const A v = *reinterpret_cast<const A*>(src + g * int64_t(N) + j);
#pragma unroll
      for (int k = 0; k < C; ++k) s[k] += v.v[k];
    }
#pragma unroll
  for (int k = 0; k < C; ++k) part[threadIdx.y][threadIdx.x * C + k] = s[k];
  __syncthreads();
  const int t = threadIdx.y * 32 + threadIdx.x;  // one column of the block's 32 * C
  if (t < 32 * C && j0 + t < N) {
    acc_t sum = 0;
    for (int i = 0; i < 32; ++i) sum += part[i][t];
    (blockIdx.y == 0 ? dw : db)[j0 + t] = from_acc<T>(sum);
  }
}

// ------------------------------------------------------------------------------------------------
// Planning: which kernel, how many threads per row, how many rows per block and blocks in all.
// ------------------------------------------------------------------------------------------------

// Threads per row for `packs` packs at `per_thread` packs each: whole warps, at most 1024 (0 = too long).
int row_threads(int packs, int per_thread) {
  const int warps = ceil_div(ceil_div(packs, per_thread), 32);
  return warps <= 32 ? warps * 32 : 0;
}

template <typename T>
bool vectorizable(int N, std::initializer_list<const void*> ptrs) {
  if (N % kPack16<T> != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

template <typename T, int kVec, int kPacks>
bool launch_forward_v3(const T* x, const T* w, const T* b, T* y, Acc<T>* mean, Acc<T>* rstd, int64_t M, int N,
                       Acc<T> eps, cudaStream_t stream) {
  const int threads = row_threads(N / kVec, kPacks);
  if (threads == 0) return false;
  const int rows = threads >= 128 ? 1 : 128 / threads;  // at least 4 warps per block
  const dim3 block(threads, rows);
  forward_v3_kernel<T, kVec, kPacks>
      <<<ceil_div<int64_t>(M, rows), block, 0, stream>>>(x, w, b, y, mean, rstd, M, N, eps);
  return true;
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
  COURSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  COURSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads * rows, smem));
  if (per_sm == 0) return false;
  const int64_t want = ceil_div<int64_t>(M, rows), cap = int64_t(per_sm) * num_sms();
  const int64_t rounds = ceil_div<int64_t>(M, rows * (want < cap ? want : cap));
  if (rounds > max_rounds) return false;
  const int64_t blocks = ceil_div<int64_t>(M, rows * rounds);  // as few blocks as give equal rounds
  kernel<<<unsigned(blocks), block, smem, stream>>>(x, w, b, y, mean, rstd, M, N, eps);
  return true;
}

struct BackwardPlan {
  int kind = 0;        // 1: rows in registers, 16-byte packs; 2: the same, one value per pack; 3: long rows;
                       // 4: rows by bulk copy (backward_v2_bulk_kernel)
  int packs = 0;       // kind 1: packs of x (and of grad_y) per thread
  int depth = 1;       // kind 1: rows loaded ahead of the one computed
  bool fuse = false;   // kind 1: column sums finished in the kernel (cooperative launch), no second kernel
  bool early = false;  // kind 4: backward_v2_bulk_kernel's kEarly (config 7)
  dim3 block;
  int blocks = 0;  // grid size, = rows of partial sums
  size_t smem = 0;
};

template <typename T, int kVec, int kPacks, int kDepth = 1, bool kFuse = false>
BackwardPlan plan_backward_rows(int kind, int64_t M, int N) {
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
  if (kFuse) {  // the column sums reuse the row sums' space: at least one value per thread
    const size_t scratch = fixed + size_t(threads) * rows * sizeof(acc_t);
    plan.smem = plan.smem > scratch ? plan.smem : scratch;
  }
  auto kernel = backward_v2_kernel<T, kVec, kPacks, kDepth, kFuse>;
  COURSE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem)));
  int per_sm = 0;
  COURSE_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads * int(rows), plan.smem));
  if (per_sm == 0) return plan;
  const int64_t want = ceil_div<int64_t>(M, rows), cap = int64_t(per_sm) * num_sms();
  plan.blocks = int(want < cap ? want : cap);
  if (kFuse) {
    // As few blocks as give the same number of rounds over the rows: every block then does the same
    // number of rows (no last round with a few blocks left running; e.g. 4096 rows in pairs: 128 blocks
    // x 16 rounds, not 132 x 15.5), and fewer partial rows to add.
    const int64_t rounds = ceil_div<int64_t>(M, rows * plan.blocks);
    plan.blocks = int(ceil_div<int64_t>(M, rows * rounds));
  }
  plan.kind = kind;
  plan.packs = kPacks;
  plan.depth = kDepth;
  plan.fuse = kFuse;
  return plan;
}

// Config 6: backward_v2_bulk_kernel (sm_90+, float/half/bf16, one 16-byte pack of the row per thread,
// so rows up to 8192 bf16 or 4096 floats, in R = 1024 / threads groups). No plan (kind 0) elsewhere.
template <typename T>
BackwardPlan plan_backward_bulk(int64_t M, int N, bool early) {
  BackwardPlan plan;
  constexpr int V = kPack16<T>;
  if constexpr (sizeof(T) <= 4) {
    if (device_attribute<cudaDevAttrComputeCapabilityMajor>() < 9 ||
        device_attribute<cudaDevAttrCooperativeLaunch>() == 0)
      return plan;
    auto kernel = early ? backward_v2_bulk_kernel<T, V, true> : backward_v2_bulk_kernel<T, V, false>;
    cudaFuncAttributes attrs;
    COURSE_CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
    if (attrs.ptxVersion < 90) return plan;  // built for an older GPU (its body is a trap)
    const int threads = row_threads(N / V, 1);
    if (threads == 0) return plan;
    const int64_t rows = 1024 / threads < M ? 1024 / threads : M;
    const size_t smem = BulkLayout<T>{int(rows), N, early}.total_bytes();
    if (smem > size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>())) return plan;
    COURSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int per_sm = 0;
    COURSE_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads * int(rows), smem));
    if (per_sm == 0) return plan;
    const int64_t want = ceil_div<int64_t>(M, rows), cap = int64_t(per_sm) * num_sms();
    const int64_t blocks = want < cap ? want : cap;
    const int64_t rounds = ceil_div<int64_t>(M, rows * blocks);  // as few blocks as give equal rounds
    plan.blocks = int(ceil_div<int64_t>(M, rows * rounds));
    plan.block = dim3(threads, unsigned(rows));
    plan.smem = smem;
    plan.kind = 4;
    plan.early = early;
    plan.packs = 1;
    plan.fuse = true;
  }
  return plan;
}

// config (2-byte types choose widths, every type the ending):
//   0 = 16 bytes of x per thread for rows up to 4096 and 32 above (measured on the H100, bf16: 16 bytes
//       wins at N = 1024 and 4096, 32 bytes at N = 8192, where the narrower width makes too many threads
//       per row), then sum_partials_kernel; 1 = always 32 bytes (the float width); 2 = 16 bytes whenever
//       the row fits;
//   3 = config 0's widths, the column sums finished inside the kernel (cooperative launch, grid.sync;
//       all types), and a grid of equal rounds; 4 = config 3, and for 2-byte types at 16 bytes, two rows
//       loaded ahead instead of one (the bytes in flight of float's 32). Configs 3 and 4 fall back to
//       config 0 where a row takes the scalar or the long-row path, or without cooperative launch.
//   6 = config 3 with the rows brought in by bulk copies (backward_v2_bulk_kernel; sm_90+, float, half,
//       bf16, rows up to 1024 packs); config 3 where it does not apply.
//   7 = config 6 with the last round's partial row written before its grad_x (kEarly).
// The default (config 0 from Python) runs config 7 for half and bf16 and config 3 for float (config 3
// took bf16 backward from 70/80/78% to 77/81/86% of copy at 4096x4096, 32768x1024, 8192x8192 and fp32
// from 83.5/89.8/90.7% to 86.6/90.0/88.9%; config 6 bf16 on to 78-82/85-88/88-92%, fp32 no faster;
// config 7 ~0.5-1 us less than 6 at 4096x4096 and 32768x1024 bf16, the same at 8192x8192).
// config 5 is the former default (config 0's widths with sum_partials_kernel), kept for comparison.
template <typename T>
BackwardPlan plan_backward_v2(const T* dy, const T* x, const T* w, const T* dx, int64_t M, int N,
                              int requested) {
  const bool bulk = requested == 6 || requested == 7;
  const int config = requested == 0 || bulk ? 3 : (requested == 5 ? 0 : requested);
  constexpr int V = kPack16<T>;
  constexpr int kScalarPacks = kBwdBytes / 8 / (sizeof(T) > 4 ? 2 : 1);  // 4 floats, 2 doubles
  BackwardPlan plan;
  if ((bulk || (requested == 0 && sizeof(T) == 2)) && vectorizable<T>(N, {dy, x, w, dx})) {
    plan = plan_backward_bulk<T>(M, N, requested == 7 || requested == 0);
    if (plan.kind == 4) return plan;
  }
  const bool fuse =
      sizeof(T) <= 4 && (config == 3 || config == 4) && device_attribute<cudaDevAttrCooperativeLaunch>() != 0;
  if (vectorizable<T>(N, {dy, x, w, dx})) {
    if constexpr (sizeof(T) == 2) {
      const bool narrow = config == 2 || (config != 1 && N <= 4096);
      if (narrow && fuse && config == 4) plan = plan_backward_rows<T, V, kBwdBytes / 32, 2, true>(1, M, N);
      if (narrow && fuse && plan.kind == 0) plan = plan_backward_rows<T, V, kBwdBytes / 32, 1, true>(1, M, N);
      if (narrow && plan.kind == 0) plan = plan_backward_rows<T, V, kBwdBytes / 32>(1, M, N);
    }
    if constexpr (sizeof(T) <= 4)
      if (fuse && plan.kind == 0) plan = plan_backward_rows<T, V, kBwdBytes / 16, 1, true>(1, M, N);
    if (plan.kind == 0) plan = plan_backward_rows<T, V, kBwdBytes / 16>(1, M, N);
  } else {
    plan = plan_backward_rows<T, 1, kScalarPacks>(2, M, N);
  }
  if (plan.kind == 0) {  // long rows: column sums over slices of rows, ~8 blocks of 256 per SM in all
    plan.kind = 3;
    plan.block = dim3(256);
    const int64_t slices = int64_t(num_sms()) * 8 / ceil_div(N, 256);
    plan.blocks = int(slices < 1 ? 1 : (slices < M ? slices : M));
  }
  return plan;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Launchers. The .cpp guarantees M > 0, N > 0, and that every pointer is on the current device.
// ------------------------------------------------------------------------------------------------

template <typename T>
void layernorm_forward_v1(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                          int64_t M, int N, Acc<T> eps, cudaStream_t stream) {
  forward_v1_kernel<T>
      <<<ceil_div<int64_t>(M, 128), 128, 0, stream>>>(x, weight, bias, y, mean, rstd, M, N, eps);
  COURSE_LAUNCH_CHECK();
}

// layernorm_forward_v2 is in kernels/layernorm.exercises.cu (with the kernel that runs the exercise).

// config (2-byte types only; others ignore it): 0 = 32 bytes per thread if the row fits, else 64, and on
// sm_90+ the pipelined kernel where it applies and does at most 4 rounds; 1 = 64 bytes (the float width);
// 2 = 16, else 32, else 64; 3 = the pipelined kernel wherever it applies (blocks of up to 256 threads),
// else 0; 4 = config 0 without the pipelined kernel (the default before it).
template <typename T>
void layernorm_forward_v3(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                          int64_t M, int N, Acc<T> eps, cudaStream_t stream, int config) {
  constexpr int V = kPack16<T>;
  const bool vec = vectorizable<T>(N, {x, weight, bias, y});
  bool done = false;
  if constexpr (sizeof(T) == 2) {  // config 0's widths, rows pipelined through shared memory (see the kernel)
    const bool hopper = device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9;
    if (vec && (config == 3 || (config == 0 && hopper)))
      done = launch_forward_v3_pipelined<T, V, kFwdBytes / 32>(x, weight, bias, y, mean, rstd, M, N, eps,
                                                               stream, config == 3 ? INT64_MAX : 4);
  }
  if (config == 4) config = 0;  // config 0 without the pipelined kernel: the default before it
  if (vec && !done) {
    if constexpr (sizeof(T) == 2) {
      if (config == 2)
        done = launch_forward_v3<T, V, kFwdBytes / 64>(x, weight, bias, y, mean, rstd, M, N, eps, stream);
      if (!done && config != 1)
        done = launch_forward_v3<T, V, kFwdBytes / 32>(x, weight, bias, y, mean, rstd, M, N, eps, stream);
    }
    if (!done)
      done = launch_forward_v3<T, V, kFwdBytes / 16>(x, weight, bias, y, mean, rstd, M, N, eps, stream);
  } else if (!vec) {
    done = launch_forward_v3<T, 1, 8>(x, weight, bias, y, mean, rstd, M, N, eps, stream);
  }
  if (!done) {
    if (vec)
      forward_v3_long_kernel<T, V><<<M, kBigThreads, 0, stream>>>(x, weight, bias, y, mean, rstd, N, eps);
    else
      forward_v3_long_kernel<T, 1><<<M, kBigThreads, 0, stream>>>(x, weight, bias, y, mean, rstd, N, eps);
  }
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void layernorm_backward_v1(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                           const T* weight, T* grad_x, T* grad_weight, T* grad_bias, int64_t M, int N,
                           cudaStream_t stream) {
  layernorm_backward_v1_dx<T>(grad_y, x, mean, rstd, weight, grad_x, M, N, stream);  // layernorm.exercises.cu
  backward_v1_dwdb_kernel<T>
      <<<ceil_div(N, 128), 128, 0, stream>>>(grad_y, x, mean, rstd, grad_weight, grad_bias, M, N);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
int64_t layernorm_backward_v2_workspace(const T* grad_y, const T* x, const T* weight, const T* grad_x,
                                        int64_t M, int N, int config) {
  return 2 * int64_t(plan_backward_v2<T>(grad_y, x, weight, grad_x, M, N, config).blocks) * N;
}

template <typename T>
void layernorm_backward_v2(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                           const T* weight, T* grad_x, T* grad_weight, T* grad_bias, Acc<T>* workspace,
                           int64_t M, int N, cudaStream_t stream, int config) {
  constexpr int V = kPack16<T>;
  constexpr int kScalarPacks = kBwdBytes / 8 / (sizeof(T) > 4 ? 2 : 1);  // 4 floats, 2 doubles
  const BackwardPlan plan = plan_backward_v2<T>(grad_y, x, weight, grad_x, M, N, config);
  const auto run = [&](auto kernel) {  // cooperative (every block resident at once) when the kernel fuses
    launch(kernel, dim3(plan.blocks), plan.block, plan.smem, stream, {plan.fuse, false}, grad_y, x, mean,
           rstd, weight, grad_x, workspace, grad_weight, grad_bias, M, N);
  };
  if (plan.kind == 4) {  // fuses (plan.fuse): cooperative
    if constexpr (sizeof(T) <= 4) {
      if (plan.early)
        run(backward_v2_bulk_kernel<T, V, true>);
      else
        run(backward_v2_bulk_kernel<T, V, false>);
    }
    COURSE_LAUNCH_CHECK();
    return;
  }
  if (plan.fuse) {  // never for double (its kernel would spill)
    if constexpr (sizeof(T) <= 4)
      if (plan.packs == kBwdBytes / 16) run(backward_v2_kernel<T, V, kBwdBytes / 16, 1, true>);
    if constexpr (sizeof(T) == 2) {
      if (plan.packs == kBwdBytes / 32 && plan.depth == 1)
        run(backward_v2_kernel<T, V, kBwdBytes / 32, 1, true>);
      if (plan.packs == kBwdBytes / 32 && plan.depth == 2)
        run(backward_v2_kernel<T, V, kBwdBytes / 32, 2, true>);
    }
    COURSE_LAUNCH_CHECK();
    return;  // grad_weight and grad_bias are written
  }
  if (plan.kind == 1 && plan.packs == kBwdBytes / 16) run(backward_v2_kernel<T, V, kBwdBytes / 16, 1, false>);
  if constexpr (sizeof(T) == 2)
    if (plan.kind == 1 && plan.packs == kBwdBytes / 32)
      run(backward_v2_kernel<T, V, kBwdBytes / 32, 1, false>);
  if (plan.kind == 2) run(backward_v2_kernel<T, 1, kScalarPacks, 1, false>);
  if (plan.kind == 3) {
    if (vectorizable<T>(N, {grad_y, x, weight, grad_x}))
      backward_v2_long_dx_kernel<T, V>
          <<<M, kBigThreads, 0, stream>>>(grad_y, x, mean, rstd, weight, grad_x, N);
    else
      backward_v2_long_dx_kernel<T, 1>
          <<<M, kBigThreads, 0, stream>>>(grad_y, x, mean, rstd, weight, grad_x, N);
    COURSE_LAUNCH_CHECK();
    const dim3 grid(ceil_div(N, 256), plan.blocks);
    column_partials_kernel<T>
        <<<grid, 256, 0, stream>>>(grad_y, x, mean, rstd, workspace, M, N, ceil_div<int64_t>(M, plan.blocks));
  }
  COURSE_LAUNCH_CHECK();
  constexpr int C = 16 / sizeof(Acc<T>);  // the workspace is 16-byte aligned; rows are if N % C == 0
  if (N % C == 0)
    sum_partials_kernel<T, C><<<dim3(ceil_div(N, 32 * C), 2), dim3(32, 32), 0, stream>>>(
        workspace, plan.blocks, N, grad_weight, grad_bias);
  else
    sum_partials_kernel<T, 1><<<dim3(ceil_div(N, 32), 2), dim3(32, 32), 0, stream>>>(
        workspace, plan.blocks, N, grad_weight, grad_bias);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T)                                                                                       \
  template void layernorm_forward_v1<T>(const T*, const T*, const T*, T*, Acc<T>*, Acc<T>*, int64_t, int,    \
                                        Acc<T>, cudaStream_t);                                               \
  template void layernorm_forward_v3<T>(const T*, const T*, const T*, T*, Acc<T>*, Acc<T>*, int64_t, int,    \
                                        Acc<T>, cudaStream_t, int);                                          \
  template void layernorm_backward_v1<T>(const T*, const T*, const Acc<T>*, const Acc<T>*, const T*, T*, T*, \
                                         T*, int64_t, int, cudaStream_t);                                    \
  template int64_t layernorm_backward_v2_workspace<T>(const T*, const T*, const T*, const T*, int64_t, int,  \
                                                      int);                                                  \
  template void layernorm_backward_v2<T>(const T*, const T*, const Acc<T>*, const Acc<T>*, const T*, T*, T*, \
                                         T*, Acc<T>*, int64_t, int, cudaStream_t, int);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
