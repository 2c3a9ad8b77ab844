// masked_softmax.cu: attention's softmax with its masks fused, y = softmax(scale * x + mask) over the last
// dimension of the scores x [..., Lq, Lk], and its backward from y (lesson 09, the practice set: the answer).
//
// Both passes are memory-bound: forward reads x (only the keys a causal mask keeps: the tail past the
// diagonal cannot change y, so it is never read) and writes y; backward reads y and grad_y and writes grad_x.
// Each row is read once: it stays in registers between the reductions (its max, then its sum) and the write,
// so the limit is a copy of those bytes. The masks are computed, never materialized (masked_softmax_math.h):
// causal is an index comparison, the padding mask a load of the batch's Lk bools, which every head and query
// of the batch shares (it stays in the caches).
//
//   up to 1024 keys   masked_softmax_warp_kernel, masked_softmax_backward_warp_kernel: one warp per row, four
//                     rows per block; lane l holds packs l, l + 32, ... of the row (8, 16 or 32 values), and
//                     the max and the sums go across the warp by shuffles: no shared memory, no barrier.
//   up to 16384 keys  masked_softmax_block_kernel, masked_softmax_backward_block_kernel: one block per row
//                     (64 to 512 threads, 32 values each; 8192 keys and 16 values in one-value packs): a
//                     warp's registers no longer hold the row, the block's do; the warps' results meet in
//                     shared memory (block_max, block_sum).
//   longer rows       masked_softmax_long_kernel, masked_softmax_backward_long_kernel: one block of 512
//                     threads per row, two passes (an online max and sum, then the write; the second pass
//                     reads the row from L2). Given, not an exercise.
//   launchers         masked_softmax_forward_cuda, masked_softmax_backward_cuda: the kernel for the row's
//                     length (rows_kind), 16-byte packs where the row allows them.
//
// A pack is 16 bytes of the row (4 floats, 8 halves or bfloat16s) moved by one load or store. A row length
// that is not a multiple of the pack's width, a tensor not on a 16-byte boundary, or float64 take packs of
// one element: the same kernels, one value per pack.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "masked_softmax.h"
#include "masked_softmax_math.h"

namespace {

constexpr int kWarpRows = 4;  // rows (warps) per block of the warp kernel: 128 threads
constexpr int kValues = 32;   // values of a row one thread holds in registers, at most
constexpr int kWarpMaxLk = 32 * kValues;
constexpr int kBlockThreads = 512;  // the block kernel's largest block: 512 * 32 values = 16384 keys
constexpr int kLongThreads = 512;
constexpr int64_t kMaxGrid = INT_MAX;  // blocks of a launch along x; the kernels loop over the rows beyond

template <typename A>
constexpr A kMasked = -__builtin_huge_valf();  // the score of a masked key: softmax_exp(kMasked, m) = 0

// e^(z - m) as 2^(z * log2 e - m * log2 e): one fused multiply-add (m * log2 e is the same for the whole row,
// computed once) and the GPU's ex2 instruction (ex2.approx.ftz: about 2 ulp, and results below 2^-126 flushed
// to 0, a weight no float sum notices), where expf(z - m) takes several more. The rounding of m * log2 e
// shifts every exponent of the row alike, which the normalization cancels; the FFMA rounds once, relative to
// the exponent. float64 keeps exp().
__device__ __forceinline__ float softmax_exp(float z, float m) {
  constexpr float kLog2e = 1.4426950408889634f;
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(fmaf(z, kLog2e, -m * kLog2e)));
  return r;
}
__device__ __forceinline__ double softmax_exp(double z, double m) { return exp(z - m); }

// The max and the sum over the 32 lanes of a warp, returned to every lane.
template <typename A>
__device__ __forceinline__ A warp_max(A v) {
  for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The max and the sum over the block, returned to every thread: each warp's result in a shared slot, then
// every warp reduces the slots itself by shuffles (the same order in every warp: the same bits in every
// thread). blockDim.x: a multiple of 32.
template <typename A>
__device__ __forceinline__ A block_max(A v) {
  __shared__ A slots[32];
  const int lane = threadIdx.x % 32;
  v = warp_max(v);
  if (lane == 0) slots[threadIdx.x / 32] = v;
  __syncthreads();
  v = warp_max(lane < int(blockDim.x / 32) ? slots[lane] : kMasked<A>);
  __syncthreads();  // the slots are free again for the next call
  return v;
}
template <typename A>
__device__ __forceinline__ A block_sum(A v) {
  __shared__ A slots[32];
  const int lane = threadIdx.x % 32;
  v = warp_sum(v);
  if (lane == 0) slots[threadIdx.x / 32] = v;
  __syncthreads();
  v = warp_sum(lane < int(blockDim.x / 32) ? slots[lane] : A(0));
  __syncthreads();
  return v;
}

// The padding mask's flags for keys j0 .. j0 + N - 1 of a row, as loaded: N bools (bytes) in 32-bit words
// (one byte for N = 1), so that testing key j0 + e is one instruction on its byte. One N-byte load: j0 is a
// multiple of N, and the launcher checked that the mask is N-byte aligned. keep == nullptr (no padding mask)
// keeps every key.
template <int N>
struct alignas(N) Flags {
  using Word = std::conditional_t<N >= 4, uint32_t, uint8_t>;
  Word w[N >= 4 ? N / 4 : 1];
  __device__ __forceinline__ bool operator[](int e) const { return (w[e / 4] >> (8 * (e % 4))) & 0xFF; }
};

template <int N>
__device__ __forceinline__ Flags<N> load_keep(const bool* keep, int64_t j0) {
  static_assert(N == 1 || N % 4 == 0, "a pack of 1, 4 or 8 keys");
  if (keep != nullptr) return *reinterpret_cast<const Flags<N>*>(keep + j0);
  Flags<N> all;
  for (auto& w : all.w) w = typename Flags<N>::Word(0x01010101u);
  return all;
}

// ---------------------------------------------------------------------------------------------------------
// Forward. Every kernel issues all of a thread's loads before it uses any: a thread's packs are then in
// flight together (one trip to memory per row, not one per pack).
// ---------------------------------------------------------------------------------------------------------

// One warp per row: warp w of block b takes rows b * kWarpRows + w, then every gridDim.x * kWarpRows-th
// after. Lane l holds the row's packs l, l + 32, ..., l + 32 * (kPacks - 1): pack p is keys p * N .. p * N +
// N - 1, so a warp's 32 loads are 32 neighbouring packs (512 contiguous bytes). c is the scale.
template <typename T, int N, int kPacks>
__global__ void __launch_bounds__(kWarpRows * 32)
    masked_softmax_warp_kernel(const T* __restrict__ x, T* __restrict__ y, SoftmaxRows s, Acc<T> c) {
  using A = Acc<T>;
  using P = Pack<T, N>;
  for (int64_t r = blockIdx.x * int64_t(kWarpRows) + threadIdx.x / 32; r < s.rows;
       r += int64_t(gridDim.x) * kWarpRows) {
    const P* xr = reinterpret_cast<const P*>(x + r * s.Lk);
    P* yr = reinterpret_cast<P*>(y + r * s.Lk);
    // TODO(exercise): your code here (the solution is 48 lines).
  }
}

// One block per row: thread t holds the row's packs t, t + blockDim.x, ..., t + blockDim.x * (kPacks - 1).
template <typename T, int N, int kPacks>
__global__ void __launch_bounds__(kBlockThreads)
    masked_softmax_block_kernel(const T* __restrict__ x, T* __restrict__ y, SoftmaxRows s, Acc<T> c) {
  using A = Acc<T>;
  using P = Pack<T, N>;
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const P* xr = reinterpret_cast<const P*>(x + r * s.Lk);
    P* yr = reinterpret_cast<P*>(y + r * s.Lk);
    // TODO(exercise): your code here (the solution is 47 lines).
  }
}

// Rows too long for a block's registers: one block per row, two passes. The first keeps, per thread, the
// largest score seen so far and the sum of exp(z - that max), rescaling the sum when the max grows (the
// online softmax); the block then brings the threads' sums to the row's max and adds them. The second pass
// reads the row again (from L2: the block read it just before) and writes y.
template <typename T, int N>
__global__ void __launch_bounds__(kLongThreads)
    masked_softmax_long_kernel(const T* __restrict__ x, T* __restrict__ y, SoftmaxRows s, Acc<T> c) {
  using A = Acc<T>;
  using P = Pack<T, N>;
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const P* xr = reinterpret_cast<const P*>(x + r * s.Lk);
    P* yr = reinterpret_cast<P*>(y + r * s.Lk);
    const int64_t limit = key_limit(s, r), packs = s.Lk / N;
    const bool* keep = keep_row(s, r);
    A m = kMasked<A>, sum = 0;
    for (int64_t p = threadIdx.x; p * N < limit; p += blockDim.x) {
      const P v = xr[p];
      const Flags<N> kept = load_keep<N>(keep, p * N);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const A z = p * N + e < limit && kept[e] ? to_acc(v.v[e]) * c : kMasked<A>;
        if (z > m) {
          sum = sum * softmax_exp(m, z) + A(1);
          m = z;
        } else if (z != kMasked<A>) {
          sum += softmax_exp(z, m);
        }
      }
    }
    A row_max = block_max(m);
    if (row_max == kMasked<A>) row_max = 0;
    sum = block_sum(sum * softmax_exp(m, row_max));
    const A inv = sum > 0 ? A(1) / sum : A(0);
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      P v = {};
      Flags<N> kept = {};
      if (p * N < limit) {
        v = xr[p];
        kept = load_keep<N>(keep, p * N);
      }
      P out;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const A z = p * N + e < limit && kept[e] ? to_acc(v.v[e]) * c : kMasked<A>;
        out.v[e] = from_acc<T>(softmax_exp(z, row_max) * inv);
      }
      yr[p] = out;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Backward: grad_x = scale * y * (grad_y - dot), dot = sum_j grad_y[j] * y[j]. No mask: a masked key has y =
// 0, so its gradient is 0 by the formula.
// ---------------------------------------------------------------------------------------------------------

template <typename T, int N, int kPacks>
__global__ void __launch_bounds__(kWarpRows * 32)
    masked_softmax_backward_warp_kernel(const T* __restrict__ grad_y, const T* __restrict__ y,
                                        T* __restrict__ grad_x, int64_t rows, int Lk, Acc<T> scale) {
  using A = Acc<T>;
  using P = Pack<T, N>;
  for (int64_t r = blockIdx.x * int64_t(kWarpRows) + threadIdx.x / 32; r < rows;
       r += int64_t(gridDim.x) * kWarpRows) {
    const P* gyr = reinterpret_cast<const P*>(grad_y + r * Lk);
    const P* yr = reinterpret_cast<const P*>(y + r * Lk);
    P* gxr = reinterpret_cast<P*>(grad_x + r * Lk);
    // TODO(exercise): your code here (the solution is 25 lines).
  }
}

template <typename T, int N, int kPacks>
__global__ void __launch_bounds__(kBlockThreads)
    masked_softmax_backward_block_kernel(const T* __restrict__ grad_y, const T* __restrict__ y,
                                         T* __restrict__ grad_x, int64_t rows, int Lk, Acc<T> scale) {
  using A = Acc<T>;
  using P = Pack<T, N>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const P* gyr = reinterpret_cast<const P*>(grad_y + r * Lk);
    const P* yr = reinterpret_cast<const P*>(y + r * Lk);
    P* gxr = reinterpret_cast<P*>(grad_x + r * Lk);
    // TODO(exercise): your code here (the solution is 24 lines).
  }
}

template <typename T, int N>
__global__ void __launch_bounds__(kLongThreads)
    masked_softmax_backward_long_kernel(const T* __restrict__ grad_y, const T* __restrict__ y,
                                        T* __restrict__ grad_x, int64_t rows, int64_t Lk, Acc<T> scale) {
  using A = Acc<T>;
  using P = Pack<T, N>;
  const int64_t packs = Lk / N;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const P* gyr = reinterpret_cast<const P*>(grad_y + r * Lk);
    const P* yr = reinterpret_cast<const P*>(y + r * Lk);
    P* gxr = reinterpret_cast<P*>(grad_x + r * Lk);
    A dot = 0;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const P yv = yr[p], gv = gyr[p];
#pragma unroll
      for (int e = 0; e < N; ++e) dot += to_acc(gv.v[e]) * to_acc(yv.v[e]);
    }
    dot = block_sum(dot);
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const P yv = yr[p], gv = gyr[p];
      P out;
#pragma unroll
      for (int e = 0; e < N; ++e) out.v[e] = from_acc<T>(scale * to_acc(yv.v[e]) * (to_acc(gv.v[e]) - dot));
      gxr[p] = out;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------------------------

// Which kernel runs: the warp kernel up to 1024 keys (with 8, 16 or 32 values a lane, the fewest that hold
// the row), the block kernel up to 16384 keys in 16-byte packs (8192 in one-value packs), with as few warps
// as hold the row (4096 bfloat16 or float32 keys take 128 threads), the long kernel beyond.
enum class Rows { kWarp, kBlock, kLong };

// Packs a thread of the block kernel holds: 32 values, or 16 one-value packs (a bool flag, a value and its
// exponential each take a register of their own there: 32 of them spill).
template <int N>
constexpr int kBlockPacks = N == 1 ? 16 : kValues / N;

template <int N>
Rows rows_kind(int64_t Lk) {
  if (Lk <= kWarpMaxLk) return Rows::kWarp;
  if (Lk <= int64_t(kBlockThreads) * kBlockPacks<N> * N) return Rows::kBlock;
  return Rows::kLong;
}

// The block kernel's threads for rows of `packs` packs, kPacks a thread: a whole number of warps.
inline int block_threads(int64_t packs, int kPacks) {
  return int(ceil_div<int64_t>(ceil_div<int64_t>(packs, kPacks), 32) * 32);
}

template <typename T, int N>
void forward(const T* x, T* y, const SoftmaxRows& s, Acc<T> c, cudaStream_t stream) {
  const int64_t packs = s.Lk / N;
  switch (rows_kind<N>(s.Lk)) {
    case Rows::kWarp: {
      const unsigned grid = unsigned(std::min(ceil_div<int64_t>(s.rows, kWarpRows), kMaxGrid));
      const int64_t per_lane = ceil_div<int64_t>(packs, 32) * N;  // values a lane holds
      if (per_lane <= 8)
        masked_softmax_warp_kernel<T, N, 8 / N><<<grid, kWarpRows * 32, 0, stream>>>(x, y, s, c);
      else if (per_lane <= 16)
        masked_softmax_warp_kernel<T, N, 16 / N><<<grid, kWarpRows * 32, 0, stream>>>(x, y, s, c);
      else
        masked_softmax_warp_kernel<T, N, 32 / N><<<grid, kWarpRows * 32, 0, stream>>>(x, y, s, c);
      break;
    }
    case Rows::kBlock: {
      constexpr int kPacks = kBlockPacks<N>;
      const unsigned grid = unsigned(std::min(s.rows, kMaxGrid));
      masked_softmax_block_kernel<T, N, kPacks>
          <<<grid, block_threads(packs, kPacks), 0, stream>>>(x, y, s, c);
      break;
    }
    case Rows::kLong: {
      const unsigned grid = unsigned(std::min(s.rows, kMaxGrid));
      masked_softmax_long_kernel<T, N><<<grid, kLongThreads, 0, stream>>>(x, y, s, c);
      break;
    }
  }
  COURSE_LAUNCH_CHECK();
}

template <typename T, int N>
void backward(const T* grad_y, const T* y, T* grad_x, int64_t rows, int64_t Lk, Acc<T> scale,
              cudaStream_t stream) {
  const int64_t packs = Lk / N;
  switch (rows_kind<N>(Lk)) {
    case Rows::kWarp: {
      const unsigned grid = unsigned(std::min(ceil_div<int64_t>(rows, kWarpRows), kMaxGrid));
      const int64_t per_lane = ceil_div<int64_t>(packs, 32) * N;
      if (per_lane <= 8)
        masked_softmax_backward_warp_kernel<T, N, 8 / N>
            <<<grid, kWarpRows * 32, 0, stream>>>(grad_y, y, grad_x, rows, int(Lk), scale);
      else if (per_lane <= 16)
        masked_softmax_backward_warp_kernel<T, N, 16 / N>
            <<<grid, kWarpRows * 32, 0, stream>>>(grad_y, y, grad_x, rows, int(Lk), scale);
      else
        masked_softmax_backward_warp_kernel<T, N, 32 / N>
            <<<grid, kWarpRows * 32, 0, stream>>>(grad_y, y, grad_x, rows, int(Lk), scale);
      break;
    }
    case Rows::kBlock: {
      constexpr int kPacks = kBlockPacks<N>;
      const unsigned grid = unsigned(std::min(rows, kMaxGrid));
      masked_softmax_backward_block_kernel<T, N, kPacks>
          <<<grid, block_threads(packs, kPacks), 0, stream>>>(grad_y, y, grad_x, rows, int(Lk), scale);
      break;
    }
    case Rows::kLong: {
      const unsigned grid = unsigned(std::min(rows, kMaxGrid));
      masked_softmax_backward_long_kernel<T, N>
          <<<grid, kLongThreads, 0, stream>>>(grad_y, y, grad_x, rows, Lk, scale);
      break;
    }
  }
  COURSE_LAUNCH_CHECK();
}

// 16-byte packs for float, half and bfloat16; float64 (gradcheck's dtype, not a fast path) one value per
// pack.
template <typename T>
constexpr int kPack = std::is_same_v<T, double> ? 1 : kPack16<T>;

inline bool aligned(const void* p, int bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace

template <typename T>
void masked_softmax_forward_cuda(const T* x, T* y, const SoftmaxRows& s, double scale, cudaStream_t stream) {
  constexpr int N = kPack<T>;
  if (N > 1 && s.Lk % N == 0 && aligned16(x) && aligned16(y) && (s.keep == nullptr || aligned(s.keep, N)))
    forward<T, N>(x, y, s, Acc<T>(scale), stream);
  else
    forward<T, 1>(x, y, s, Acc<T>(scale), stream);
}

template <typename T>
void masked_softmax_backward_cuda(const T* grad_y, const T* y, T* grad_x, int64_t rows, int64_t Lk,
                                  double scale, cudaStream_t stream) {
  constexpr int N = kPack<T>;
  if (N > 1 && Lk % N == 0 && aligned16(grad_y) && aligned16(y) && aligned16(grad_x))
    backward<T, N>(grad_y, y, grad_x, rows, Lk, Acc<T>(scale), stream);
  else
    backward<T, 1>(grad_y, y, grad_x, rows, Lk, Acc<T>(scale), stream);
}

#define INSTANTIATE(T)                                                                                  \
  template void masked_softmax_forward_cuda<T>(const T*, T*, const SoftmaxRows&, double, cudaStream_t); \
  template void masked_softmax_backward_cuda<T>(const T*, const T*, T*, int64_t, int64_t, double,       \
                                                cudaStream_t);
COURSE_FOR_EACH_DTYPE(INSTANTIATE)
