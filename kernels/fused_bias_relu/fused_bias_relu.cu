// kernels/fused_bias_relu/fused_bias_relu.cu: y = relu(x * scale + bias), forward and backward (lesson 02).
//
// x is [rows, cols] (any [..., C] tensor, flattened), bias is [cols], scale a number. One kernel reads x
// once and writes y once, where native PyTorch runs three (mul, add, relu). Backward: grad_x = grad_y *
// scale * relu'(z), element-wise, and grad_bias = the sum over the rows of grad_y * relu'(z), a reduction.
// The versions (kernel / launcher), in the order lesson 02 builds them; numbers never change:
//
//   forward v1   forward_v1_kernel / fbr_forward_v1: one thread per element, bias column i % cols. Right,
//                but a 64-bit modulo and a sizeof(T) load per element.
//   forward v2   forward_v2_kernel / fbr_forward_v2: a 2-D grid; each thread owns one 16-byte Pack of
//                columns (its bias Pack stays in registers, no modulo) and walks down the rows with 4 rows
//                (64 bytes) in flight, in one wave of equal blocks. Optionally writes a 1-byte mask.
//   forward v3   forward_v3_kernel / fbr_forward_v3, the default: thread i does Pack i of the flat tensor,
//                its bias Pack i % (cols / N) by a 32-bit modulo: exactly a copy's access pattern (each warp
//                512 contiguous bytes, blocks retiring in address order, no loop, no fixed wave whose slowest
//                SM sets the end). v2 when cols or a pointer does not allow Packs.
//     + bits     the same kernel also writing relu'(z) as a bit mask (bit e % 32 of word e / 32): the lanes
//                sharing a word OR their fields with shuffles, so backward reads 1 bit instead of y.
//   backward v1  backward_kernel<..., false> + sum_partials_kernel / fbr_backward(BiasSums::kPartials):
//                grad_x and the column sums in one pass over v2's grid; each block writes one row of partial
//                sums (a fixed tree in shared memory), a second small kernel adds them per column in a fixed
//                order (launched with PDL on Hopper). No float atomics: the same bits on every run.
//                fbr_backward_partial_rows sizes the partial-sum buffer the .cpp allocates.
//   backward v2  backward_kernel<..., true> + finish_column_sums / fbr_backward(BiasSums::kCooperative), the
//                default: v1 in one cooperative kernel whose blocks add the partial rows after grid.sync: no
//                second launch, no short idle kernel at the end. v1 where it cannot launch cooperatively.
//   backward v3  fbr_backward without sums, then bias_grad_column_kernel / fbr_bias_grad_v3: one thread per
//                column reading y, down all the rows. The simplest reduction; one pass more, and only cols
//                threads add (4096 columns: about one warp per SM, each with few loads in flight).
//   backward v4  fbr_backward without sums, then bias_grad_partials_kernel + bias_grad_finish_kernel /
//                fbr_bias_grad_v4 (lesson 02's exercise, kernels/exercises/bias_grad.cuh, launched in
//                fused_bias_relu.exercises.cu): blocks of 32 columns x 16 lanes each add a tile of rows in
//                shared memory into one partial sum per column, a second kernel adds the partials: every
//                SM busy, in a fixed order (the same bits on every run). fbr_bias_grad_v4_parts sizes the
//                partial-sum buffer the .cpp allocates.
//
// Everything is computed in Acc<T> (float, double for double inputs) and stored as T. relu(z) is
// `z <= 0 ? 0 : z`, so a NaN goes through, as in torch.relu, and its gradient too.
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "fused_bias_relu.h"

namespace {

constexpr int kThreads = 256;
// Rows a thread loads before it computes and stores any of them: 4 Packs (64 bytes) in flight each.
constexpr int kRows = 4;          // forward reads one tensor
constexpr int kBackwardRows = 4;  // backward reads two (grad_y and what forward saved): 128 bytes
// At most 64 registers a thread, so at least 4 blocks of 256 threads fit on an SM (1024 threads).
#define FBR_BOUNDS __launch_bounds__(kThreads, 4)
// Backward holds 4 rows of 2 tensors (2 x 4 x 16 bytes) plus the sums: at most 128 registers, so no
// spills for bfloat16 (64 spilled); at least 2 blocks an SM, 64 KB in flight, plenty to cover latency.
#define FBR_BACKWARD_BOUNDS __launch_bounds__(kThreads, 2)

// relu lets z through where z > 0 (and where z is NaN, like torch.relu).
template <typename acc_t>
__device__ __forceinline__ bool passes(acc_t z) {
  return !(z <= acc_t(0));
}

// v1: thread i handles element i. One modulo per element finds the bias column.
template <typename T>
__global__ void forward_v1_kernel(const T* __restrict__ x, const T* __restrict__ bias, Acc<T> scale,
                                  T* __restrict__ y, int64_t n, int64_t cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const Acc<T> z = to_acc(x[i]) * scale + to_acc(bias[i % cols]);
  y[i] = from_acc<T>(passes(z) ? z : Acc<T>(0));
}

// v2: thread (tx, ty) of block (bx, by) owns column Pack bx * blockDim.x + tx for the whole run and
// visits rows by * blockDim.y + ty, then every gridDim.y * blockDim.y rows. x and y are not
// __restrict__: the in-place variant passes the same pointer for both.
template <typename T, int N>
__global__ void FBR_BOUNDS forward_v2_kernel(const T* x, const T* __restrict__ bias, Acc<T> scale, T* y,
                                             bool* __restrict__ mask, int64_t rows, int64_t cols) {
  using acc_t = Acc<T>;
  using P = Pack<T, N>;
  using M = Pack<uint8_t, N>;
  const int64_t packs = cols / N;
  const int64_t cp = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (cp >= packs) return;
  acc_t b[N];
  const P bp = reinterpret_cast<const P*>(bias)[cp];
#pragma unroll
  for (int k = 0; k < N; ++k) b[k] = to_acc(bp.v[k]);
  const int64_t stride = int64_t(gridDim.y) * blockDim.y;
  for (int64_t r0 = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; r0 < rows; r0 += kRows * stride) {
    P p[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u)
      if (r0 + u * stride < rows) p[u] = reinterpret_cast<const P*>(x)[(r0 + u * stride) * packs + cp];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      if (r0 + u * stride >= rows) continue;
      M m;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const acc_t z = to_acc(p[u].v[k]) * scale + b[k];
        m.v[k] = passes(z);
        p[u].v[k] = from_acc<T>(m.v[k] ? z : acc_t(0));
      }
      const int64_t i = (r0 + u * stride) * packs + cp;
      reinterpret_cast<P*>(y)[i] = p[u];
      if (mask) reinterpret_cast<M*>(mask)[i] = m;
    }
  }
}

// v3: thread i handles Pack i of the flat [rows, cols] tensor (cols % N == 0, so no tail); its bias Pack
// is i % (cols / N). I is uint32_t when every Pack index (plus one block) fits, else int64_t.
// With `bits`, relu'(z) is also written as a bit mask: bit e % 32 of word e / 32 for flat element e. A
// thread's N bits are one N-bit field of a word shared by G = 32 / N neighbouring lanes, which OR their
// fields together with shuffles; the first lane of the G stores the word (a warp stores N whole words).
template <typename T, int N, typename I>
__global__ void forward_v3_kernel(const T* x, const T* __restrict__ bias, Acc<T> scale, T* y,
                                  bool* __restrict__ mask, uint32_t* __restrict__ bits, I packs,
                                  I col_packs) {
  using acc_t = Acc<T>;
  using P = Pack<T, N>;
  using M = Pack<uint8_t, N>;
  static_assert(32 % N == 0, "a word holds the bits of whole Packs");
  constexpr int G = 32 / N;
  const I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x);
  const bool active = i < packs;
  if (!active && bits == nullptr) return;  // with bits, every lane takes part in the shuffles
  uint32_t field = 0;
  if (active) {
    P p = reinterpret_cast<const P*>(x)[i];
    const P bp = reinterpret_cast<const P*>(bias)[i % col_packs];
    M m;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const acc_t z = to_acc(p.v[k]) * scale + to_acc(bp.v[k]);
      m.v[k] = passes(z);
      field |= uint32_t(m.v[k]) << k;
      p.v[k] = from_acc<T>(m.v[k] ? z : acc_t(0));
    }
    reinterpret_cast<P*>(y)[i] = p;
    if (mask) reinterpret_cast<M*>(mask)[i] = m;
  }
  if (bits == nullptr) return;  // the same for the whole grid
  uint32_t word = field << ((threadIdx.x % G) * N);
#pragma unroll
  for (int o = 1; o < G; o *= 2) word |= __shfl_xor_sync(0xffffffffu, word, o);
  if (active && threadIdx.x % G == 0) bits[i / G] = word;
}

// Did relu let element k through? From x (z recomputed exactly as forward did), y, or the mask.
template <Saved S, typename V, typename acc_t>
__device__ __forceinline__ bool let_through(V saved, acc_t scale, acc_t b) {
  if constexpr (S == Saved::kInput)
    return passes(to_acc(saved) * scale + b);
  else if constexpr (S == Saved::kOutput)
    return passes(to_acc(saved));
  else
    return saved != 0;
}

// The end of backward v2: grad_bias[c] = the sum over p of partials[p][c] (P = gridDim.y rows), inside
// the backward kernel after grid.sync: common.h's add_columns_in_order splits the columns over all the
// blocks of the grid and adds each in a fixed order (the same bits on every run).
template <typename T, typename acc_t>
__device__ void finish_column_sums(const acc_t* partials, int64_t cols, T* __restrict__ grad_bias,
                                   acc_t* scratch) {
  const int64_t block = blockIdx.y * int64_t(gridDim.x) + blockIdx.x, blocks = int64_t(gridDim.x) * gridDim.y;
  add_columns_in_order(
      cols, block, blocks, int(gridDim.y), cols, [&](int64_t q) { return partials + q; },
      [&](int64_t q, acc_t v) { grad_bias[q] = from_acc<T>(v); }, scratch);
}

// The grid of forward v2, plus the bias-gradient sums: per thread in registers, then per block over
// threadIdx.y in shared memory (a fixed tree), written to partials[blockIdx.y][columns].
template <typename T, int N, Saved S, bool kFuse>
__global__ void FBR_BACKWARD_BOUNDS backward_kernel(const T* __restrict__ grad_y,
                                                    const void* __restrict__ saved,
                                                    const T* __restrict__ bias, Acc<T> scale,
                                                    T* __restrict__ grad_x, Acc<T>* __restrict__ partials,
                                                    T* __restrict__ grad_bias, int64_t rows, int64_t cols) {
  using acc_t = Acc<T>;
  using P = Pack<T, N>;
  using SP = std::conditional_t<S == Saved::kMask, Pack<uint8_t, N>, Pack<T, N>>;
  const int64_t packs = cols / N;
  const int64_t cp = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const bool active = cp < packs;  // idle threads still take part in the block's sum
  acc_t b[N], sum[N];
#pragma unroll
  for (int k = 0; k < N; ++k) b[k] = sum[k] = acc_t(0);
  if (S == Saved::kInput && active) {
    const P bp = reinterpret_cast<const P*>(bias)[cp];
#pragma unroll
    for (int k = 0; k < N; ++k) b[k] = to_acc(bp.v[k]);
  }
  const SP* sv = reinterpret_cast<const SP*>(saved);
  const uint32_t* words = static_cast<const uint32_t*>(saved);  // kBits: bit e % 32 of word e / 32
  constexpr int G = 32 / N;                                     // Packs per word
  const int64_t stride = int64_t(gridDim.y) * blockDim.y;
  for (int64_t r0 = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; active && r0 < rows;
       r0 += kBackwardRows * stride) {
    P g[kBackwardRows];
    SP s[kBackwardRows];
    uint32_t field[kBackwardRows];  // kBits: this Pack's N bits
#pragma unroll
    for (int u = 0; u < kBackwardRows; ++u) {
      const int64_t i = (r0 + u * stride) * packs + cp;
      if (r0 + u * stride < rows) {
        g[u] = reinterpret_cast<const P*>(grad_y)[i];
        if constexpr (S == Saved::kBits)
          field[u] = words[i / G] >> ((i % G) * N);
        else
          s[u] = sv[i];
      }
    }
#pragma unroll
    for (int u = 0; u < kBackwardRows; ++u) {
      if (r0 + u * stride >= rows) continue;
      P out;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const acc_t gv = to_acc(g[u].v[k]);
        bool pass;
        if constexpr (S == Saved::kBits)
          pass = (field[u] >> k) & 1u;
        else
          pass = let_through<S>(s[u].v[k], scale, b[k]);
        out.v[k] = from_acc<T>(pass ? gv * scale : acc_t(0));
        sum[k] += pass ? gv : acc_t(0);
      }
      reinterpret_cast<P*>(grad_x)[(r0 + u * stride) * packs + cp] = out;
    }
  }
  allow_next_grid();                // v1's sum_partials_kernel may start launching
  if (partials == nullptr) return;  // the same for every thread of the grid
  __shared__ acc_t red[kThreads * N];
  acc_t* mine = red + (threadIdx.y * blockDim.x + threadIdx.x) * N;
#pragma unroll
  for (int k = 0; k < N; ++k) mine[k] = sum[k];
  __syncthreads();
  for (int h = blockDim.y / 2; h > 0; h /= 2) {
    if (threadIdx.y < h)
#pragma unroll
      for (int k = 0; k < N; ++k) mine[k] += mine[h * blockDim.x * N + k];
    __syncthreads();
  }
  if (threadIdx.y == 0 && active)
#pragma unroll
    for (int k = 0; k < N; ++k) partials[blockIdx.y * cols + cp * N + k] = mine[k];
  if constexpr (kFuse) {
    // v2: every block's partial row is written once all blocks arrive here (a cooperative launch: the
    // whole grid is resident, and grid.sync fences memory); then the blocks split the column sums.
    cooperative_groups::this_grid().sync();
    finish_column_sums(partials, cols, grad_bias, red);
  }
}

// grad_bias[c] = the sum over p of partials[p][c]. Block (32, 16): 32 columns side by side (coalesced),
// 16 threads per column each adding every 16th row in order (the loads unrolled, so several are in
// flight), then a fixed tree over the 16.
constexpr int kSumCols = 32, kSumLanes = 16;
template <typename T>
__global__ void sum_partials_kernel(const Acc<T>* __restrict__ partials, int parts, int64_t cols,
                                    T* __restrict__ grad_bias) {
  using acc_t = Acc<T>;
  wait_for_previous_grid();  // launched with PDL: the partials come from backward_kernel
  __shared__ acc_t red[kSumLanes][kSumCols];
  const int64_t c = blockIdx.x * int64_t(kSumCols) + threadIdx.x;
  acc_t s = 0;
  if (c < cols)
#pragma unroll 4
    for (int p = threadIdx.y; p < parts; p += kSumLanes) s += partials[p * cols + c];
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  for (int h = kSumLanes / 2; h > 0; h /= 2) {
    if (threadIdx.y < h) red[threadIdx.y][threadIdx.x] += red[threadIdx.y + h][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols) grad_bias[c] = from_acc<T>(red[0][threadIdx.x]);
}

// Backward v3's grad_bias: thread c adds column c down all the rows. Neighbouring threads of a warp read
// neighbouring columns of the same row at each step, so each step is one coalesced load per warp; but
// only `cols` threads work, each waiting for one row's loads before the next.
template <typename T>
__global__ void bias_grad_column_kernel(const T* __restrict__ grad_y, const T* __restrict__ y,
                                        T* __restrict__ grad_bias, int64_t rows, int64_t cols) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  Acc<T> sum = 0;
  for (int64_t r = 0; r < rows; ++r)
    if (passes(to_acc(y[r * cols + c]))) sum += to_acc(grad_y[r * cols + c]);
  grad_bias[c] = from_acc<T>(sum);
}

// ------------------------------------------------------------------------------------------------
// Grid planning
// ------------------------------------------------------------------------------------------------

struct Plan {
  dim3 grid, block;
};

// Block: tx threads side by side on a row's column Packs (a power of two up to 32: a warp reads up to
// 32 consecutive Packs, 512 contiguous bytes) and ty = 256 / tx rows. Grid: x over column chunks, y over
// row blocks, no more blocks than fit on the GPU at once (`resident`), and every thread gets the same
// number of rows, a multiple of `step` (the rows a thread loads at once): one wave of equal blocks.
Plan make_plan(int64_t rows, int64_t col_packs, int resident, int step) {
  int tx = 1;
  while (tx < 32 && tx < col_packs) tx *= 2;
  const int ty = kThreads / tx;
  const int64_t gx = ceil_div<int64_t>(col_packs, tx);
  const int64_t gy_max = std::max<int64_t>(1, resident / gx);
  const int64_t per_thread = ceil_div<int64_t>(ceil_div<int64_t>(rows, gy_max * ty), step) * step;
  const int64_t gy = ceil_div<int64_t>(rows, per_thread * ty);
  return {dim3(unsigned(gx), unsigned(gy)), dim3(tx, ty)};
}

// Blocks of `kernel` resident on the whole GPU at once (callers cache it: one GPU model assumed).
template <typename K>
int resident_blocks(K kernel) {
  int per_sm = 0;
  COURSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
  return std::max(1, per_sm) * num_sms();
}

template <typename T, int N>
void launch_forward_v2(const T* x, const T* bias, Acc<T> scale, T* y, bool* mask, int64_t rows, int64_t cols,
                       cudaStream_t stream) {
  static const int resident = resident_blocks(forward_v2_kernel<T, N>);
  const Plan p = make_plan(rows, cols / N, resident, kRows);
  forward_v2_kernel<T, N><<<p.grid, p.block, 0, stream>>>(x, bias, scale, y, mask, rows, cols);
  COURSE_LAUNCH_CHECK();
}

template <typename T, int N, Saved S, bool kFuse>
Plan backward_plan(int64_t rows, int64_t cols, bool* fits = nullptr) {
  static const int resident = resident_blocks(backward_kernel<T, N, S, kFuse>);
  const Plan p = make_plan(rows, cols / N, resident, kBackwardRows);
  if (fits) *fits = int64_t(p.grid.x) * p.grid.y <= resident;  // very wide rows need more column blocks
  return p;
}

// Backward v2 (the column sums finished in the same kernel) needs a cooperative launch: a GPU that can,
// and a grid whose blocks are all resident at once. Otherwise v1.
struct BackwardChoice {
  bool fuse;
  Plan plan;
};
template <typename T, int N, Saved S>
BackwardChoice choose_backward(BiasSums sums, bool bias_grad, int64_t rows, int64_t cols) {
  if (sums == BiasSums::kCooperative && bias_grad && device_attribute<cudaDevAttrCooperativeLaunch>() != 0) {
    bool fits = false;
    const Plan p = backward_plan<T, N, S, true>(rows, cols, &fits);
    if (fits) return {true, p};
  }
  return {false, backward_plan<T, N, S, false>(rows, cols)};
}

template <int N, Saved S>
struct Config {
  static constexpr int n = N;
  static constexpr Saved saved = S;
};

// Calls f(Config<N, kind>{}) with N = a 16-byte Pack when every row and pointer allows it, else 1.
template <typename T, typename F>
void with_config(const T* grad_y, const void* saved, Saved kind, const T* bias, const T* grad_x, int64_t cols,
                 F&& f) {
  constexpr int N = kPack16<T>;
  // The bit mask is laid out by element, not by Pack: any Pack width reads it (4-byte words).
  const bool vec = cols % N == 0 && aligned16(grad_y) && (kind == Saved::kBits || aligned16(saved)) &&
                   aligned16(grad_x) && (kind != Saved::kInput || aligned16(bias));
  switch (kind) {
    case Saved::kInput:
      return vec ? f(Config<N, Saved::kInput>{}) : f(Config<1, Saved::kInput>{});
    case Saved::kOutput:
      return vec ? f(Config<N, Saved::kOutput>{}) : f(Config<1, Saved::kOutput>{});
    case Saved::kMask:
      return vec ? f(Config<N, Saved::kMask>{}) : f(Config<1, Saved::kMask>{});
    case Saved::kBits:
      return vec ? f(Config<N, Saved::kBits>{}) : f(Config<1, Saved::kBits>{});
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Launchers. The .cpp guarantees rows > 0 and cols > 0, and that every pointer is on the current device.
// ------------------------------------------------------------------------------------------------

template <typename T>
void fbr_forward_v1(const T* x, const T* bias, Acc<T> scale, T* y, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
  const int64_t n = rows * cols;
  forward_v1_kernel<T><<<ceil_div<int64_t>(n, kThreads), kThreads, 0, stream>>>(x, bias, scale, y, n, cols);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void fbr_forward_v2(const T* x, const T* bias, Acc<T> scale, T* y, bool* mask, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
  constexpr int N = kPack16<T>;
  if (cols % N == 0 && aligned16(x) && aligned16(y) && aligned16(bias) && aligned16(mask))
    launch_forward_v2<T, N>(x, bias, scale, y, mask, rows, cols, stream);
  else
    launch_forward_v2<T, 1>(x, bias, scale, y, mask, rows, cols, stream);
}

template <typename T, int N>
void launch_forward_v3(const T* x, const T* bias, Acc<T> scale, T* y, bool* mask, uint32_t* bits,
                       int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t packs = rows * (cols / N);
  const int64_t blocks = ceil_div<int64_t>(packs, kThreads);
  // 32-bit indices when the last block's last thread index still fits (no wrap-around past UINT32_MAX).
  if (blocks * kThreads <= int64_t(UINT32_MAX))
    forward_v3_kernel<T, N, uint32_t>
        <<<blocks, kThreads, 0, stream>>>(x, bias, scale, y, mask, bits, uint32_t(packs), uint32_t(cols / N));
  else
    forward_v3_kernel<T, N, int64_t>
        <<<blocks, kThreads, 0, stream>>>(x, bias, scale, y, mask, bits, packs, cols / N);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void fbr_forward_v3(const T* x, const T* bias, Acc<T> scale, T* y, bool* mask, uint32_t* bits, int64_t rows,
                    int64_t cols, cudaStream_t stream) {
  constexpr int N = kPack16<T>;
  if (cols % N == 0 && aligned16(x) && aligned16(y) && aligned16(bias) && aligned16(mask))
    launch_forward_v3<T, N>(x, bias, scale, y, mask, bits, rows, cols, stream);
  else if (bits)  // only v3 writes the bit mask: one value per thread
    launch_forward_v3<T, 1>(x, bias, scale, y, mask, bits, rows, cols, stream);
  else
    fbr_forward_v2(x, bias, scale, y, mask, rows, cols, stream);
}

template <typename T>
int fbr_backward_partial_rows(const T* grad_y, const void* saved, Saved kind, const T* bias, const T* grad_x,
                              int64_t rows, int64_t cols, BiasSums sums) {
  int parts = 0;
  with_config(grad_y, saved, kind, bias, grad_x, cols, [&](auto c) {
    using C = decltype(c);
    parts = int(choose_backward<T, C::n, C::saved>(sums, true, rows, cols).plan.grid.y);
  });
  return parts;
}

template <typename T>
void fbr_backward(const T* grad_y, const void* saved, Saved kind, const T* bias, Acc<T> scale, T* grad_x,
                  Acc<T>* partials, T* grad_bias, int64_t rows, int64_t cols, BiasSums sums,
                  cudaStream_t stream) {
  with_config(grad_y, saved, kind, bias, grad_x, cols, [&](auto c) {
    using C = decltype(c);
    const BackwardChoice choice = choose_backward<T, C::n, C::saved>(sums, grad_bias != nullptr, rows, cols);
    const Plan& p = choice.plan;
    if (choice.fuse) {  // v2: one cooperative kernel
      launch(backward_kernel<T, C::n, C::saved, true>, p.grid, p.block, 0, stream, {true, false}, grad_y,
             saved, bias, scale, grad_x, partials, grad_bias, rows, cols);
      return;
    }
    launch(backward_kernel<T, C::n, C::saved, false>, p.grid, p.block, 0, stream, {false, false}, grad_y,
           saved, bias, scale, grad_x, grad_bias ? partials : nullptr, grad_bias, rows, cols);
    if (grad_bias) {
      const dim3 block(kSumCols, kSumLanes);
      const unsigned blocks = unsigned(ceil_div<int64_t>(cols, kSumCols));
      launch(sum_partials_kernel<T>, dim3(blocks), block, 0, stream, {false, true}, partials, int(p.grid.y),
             cols, grad_bias);
    }
  });
}

template <typename T>
void fbr_bias_grad_v3(const T* grad_y, const T* y, T* grad_bias, int64_t rows, int64_t cols,
                      cudaStream_t stream) {
  bias_grad_column_kernel<T>
      <<<ceil_div<int64_t>(cols, kThreads), kThreads, 0, stream>>>(grad_y, y, grad_bias, rows, cols);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T)                                                                                    \
  template void fbr_bias_grad_v3<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t);              \
  template void fbr_forward_v1<T>(const T*, const T*, Acc<T>, T*, int64_t, int64_t, cudaStream_t);        \
  template void fbr_forward_v2<T>(const T*, const T*, Acc<T>, T*, bool*, int64_t, int64_t, cudaStream_t); \
  template void fbr_forward_v3<T>(const T*, const T*, Acc<T>, T*, bool*, uint32_t*, int64_t, int64_t,     \
                                  cudaStream_t);                                                          \
  template int fbr_backward_partial_rows<T>(const T*, const void*, Saved, const T*, const T*, int64_t,    \
                                            int64_t, BiasSums);                                           \
  template void fbr_backward<T>(const T*, const void*, Saved, const T*, Acc<T>, T*, Acc<T>*, T*, int64_t, \
                                int64_t, BiasSums, cudaStream_t);

INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
