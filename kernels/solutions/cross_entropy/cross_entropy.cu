// cross_entropy.cu: fused softmax cross-entropy on the GPU, forward, backward and the in-place gradient
// (lesson 09's practice op: the answer). The math is cross_entropy_math.h's, in float (double for float64).
//
// A row of a language model's logits is long (V = 128256 for LLaMA 3: 250 KiB in bfloat16) and there are
// thousands, so each kernel is a stream over the logits, one block per row at a time (blocks loop over rows
// r = blockIdx.x, + gridDim.x, ...), 16-byte loads (Packs), never a [rows, V] softmax in memory.
//
//   cross_entropy_count_kernel     one block: the rows whose target is not ignore_index (the mean's count)
//   cross_entropy_rows_kernel<T, false>
//                                  per row, pass 1: the online max and sum of exp, the sum of x and the
//                                  target's logit -> lse and the row's loss. Reads the logits once.
//   cross_entropy_rows_kernel<T, true>
//                                  + pass 2: the gradient written over the logits (reads them again, from the
//                                  row's end back: what pass 1 read last is the likeliest still in L2)
//   cross_entropy_finish_kernel    one block: the rows' losses summed in a fixed order (the same bits every
//                                  run), over the count for the mean
//   cross_entropy_backward_kernel  per row: grad = (softmax - onehot terms) * grad_loss, softmax from lse
//   cross_entropy_scale_kernel     per row: the in-place gradient times grad_loss (a factor of 1: skipped)
// Launchers: cross_entropy_forward_cuda (count, rows, finish), cross_entropy_backward_cuda (count, backward),
// cross_entropy_scale_cuda.
//
// Bytes (b = V * sizeof(T) per row): forward alone reads b; backward reads b and writes b; the in-place
// forward reads b, writes b, and reads b a second time (from L2 where the rows in flight fit there).
//
// A target outside [0, V) that is not ignore_index is not checked here: a device-side assert would end the
// process's use of the GPU. Its row's loss is NaN instead (so is the mean), and its gradient row NaN.
#include <map>
#include <mutex>
#include <tuple>

#include "cross_entropy.h"
#include "cross_entropy_math.h"

namespace {

constexpr int kUnroll = 4;  // Packs a thread loads before it uses the first: 64 bytes in flight per thread
constexpr int kMaxThreads = 1024;

// A row's columns as the kernels walk them: `head` values before the first 16-byte boundary (a row of odd
// length, or logits at an offset, starts anywhere), then `packs` whole Packs, then the values from `tail` on.
struct RowSplit {
  int64_t head, packs, tail;
};

template <typename T>
__device__ RowSplit split_row(const T* row, int64_t V) {
  constexpr int N = kPack16<T>;
  const int64_t to_boundary = (16 - reinterpret_cast<uintptr_t>(row) % 16) % 16 / sizeof(T);
  const int64_t head = to_boundary < V ? to_boundary : V;
  const int64_t packs = (V - head) / N;
  return {head, packs, head + packs * N};
}

template <typename T, int N>
__device__ __forceinline__ void add_pack(const Pack<T, N>& p, Acc<T>& m, Acc<T>& s, Acc<T>& sx) {
  Acc<T> v[N];
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = to_acc(p.v[k]);
  ce_add(v, m, s, sx);
}

// This thread's share of the row into (m, s, sx): Packs tid, tid + blockDim.x, ..., kUnroll of them loaded at
// once, then the few values outside whole Packs.
template <typename T>
__device__ void row_partial(const T* row, int64_t V, Acc<T>& m, Acc<T>& s, Acc<T>& sx) {
  using P = Pack<T, kPack16<T>>;
  const RowSplit sp = split_row(row, V);
  const P* body = reinterpret_cast<const P*>(row + sp.head);
  const int64_t step = blockDim.x;
  int64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * step < sp.packs; i += kUnroll * step) {
    P p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) p[u] = body[i + u * step];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) add_pack(p[u], m, s, sx);
  }
  for (; i < sp.packs; i += step) add_pack(body[i], m, s, sx);
  for (int64_t j = threadIdx.x; j < sp.head; j += step) ce_add(to_acc(row[j]), m, s, sx);
  for (int64_t j = sp.tail + threadIdx.x; j < V; j += step) ce_add(to_acc(row[j]), m, s, sx);
}

// out[j] = f(in[j], j) over the row (in == out: in place). By Packs where in and out sit alike against 16
// bytes (in place, or a contiguous gradient of contiguous logits), else one value at a time. From the row's
// end back to its start (see the rows kernel); kUnroll Packs loaded before the first is stored.
template <typename T, typename F>
__device__ void row_map(const T* in, T* out, int64_t V, F f) {
  using P = Pack<T, kPack16<T>>;
  constexpr int N = kPack16<T>;
  const int64_t step = blockDim.x;
  if (reinterpret_cast<uintptr_t>(in) % 16 != reinterpret_cast<uintptr_t>(out) % 16) {
    for (int64_t j = threadIdx.x; j < V; j += step) out[j] = from_acc<T>(f(to_acc(in[j]), j));
    return;
  }
  const RowSplit sp = split_row(in, V);
  const P* src = reinterpret_cast<const P*>(in + sp.head);
  P* dst = reinterpret_cast<P*>(out + sp.head);
  const auto map_pack = [=](const P& p, int64_t i) {
    P q;
#pragma unroll
    for (int k = 0; k < N; ++k) q.v[k] = from_acc<T>(f(to_acc(p.v[k]), sp.head + i * N + k));
    dst[i] = q;
  };
  int64_t i = sp.packs - 1 - threadIdx.x;
  for (; i - (kUnroll - 1) * step >= 0; i -= kUnroll * step) {
    P p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) p[u] = src[i - u * step];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) map_pack(p[u], i - u * step);
  }
  for (; i >= 0; i -= step) map_pack(src[i], i);
  for (int64_t j = threadIdx.x; j < sp.head; j += step) out[j] = from_acc<T>(f(to_acc(in[j]), j));
  for (int64_t j = sp.tail + threadIdx.x; j < V; j += step) out[j] = from_acc<T>(f(to_acc(in[j]), j));
}

// The row set to `value` (an ignored row's gradient, 0; a bad target's, NaN) without reading anything.
template <typename T>
__device__ void row_fill(T* out, int64_t V, Acc<T> value) {
  using P = Pack<T, kPack16<T>>;
  const T v = from_acc<T>(value);
  P q;
#pragma unroll
  for (int k = 0; k < kPack16<T>; ++k) q.v[k] = v;
  const RowSplit sp = split_row(out, V);
  P* dst = reinterpret_cast<P*>(out + sp.head);
  for (int64_t i = threadIdx.x; i < sp.packs; i += blockDim.x) dst[i] = q;
  for (int64_t j = threadIdx.x; j < sp.head; j += blockDim.x) out[j] = v;
  for (int64_t j = sp.tail + threadIdx.x; j < V; j += blockDim.x) out[j] = v;
}

template <typename A>
__device__ __forceinline__ void warp_merge(A& m, A& s, A& sx) {
  for (int off = 16; off > 0; off /= 2) {
    const A m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off),
            sx2 = __shfl_xor_sync(0xffffffffu, sx, off);
    ce_merge(m, s, sx, m2, s2, sx2);
  }
}

// The threads' partial (m, s, sx) of one row merged; every thread gets the block's result, the same bits in
// each: every warp merges the warps' partials in the same order, and takes lane 0's (the lanes of a butterfly
// may round apart where the compiler fuses a multiply-add, which is not symmetric).
template <typename A>
__device__ void block_merge(A& m, A& s, A& sx) {
  __shared__ A part[3][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  warp_merge(m, s, sx);
  if (lane == 0) part[0][warp] = m, part[1][warp] = s, part[2][warp] = sx;
  __syncthreads();
  const bool have = lane < int(blockDim.x / 32);
  m = have ? part[0][lane] : ce_neg_inf<A>();
  s = have ? part[1][lane] : A(0);
  sx = have ? part[2][lane] : A(0);
  warp_merge(m, s, sx);
  m = __shfl_sync(0xffffffffu, m, 0);
  s = __shfl_sync(0xffffffffu, s, 0);
  sx = __shfl_sync(0xffffffffu, sx, 0);
  __syncthreads();  // every warp has read `part`: the next row's merge may write it
}

__global__ void cross_entropy_count_kernel(const int64_t* target, int64_t rows, int64_t ignore_index,
                                           double* count) {
  double c[1] = {0};
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) c[0] += target[r] != ignore_index;
  block_sum(c);
  if (threadIdx.x == 0) *count = c[0];
}

// Per row r: lse_out[r] (if not null), the loss (loss_none[r] in T for the unreduced loss, else row_loss[r]
// in A for the finish kernel), and with kInplace the gradient written to grad (== x), times 1 / *count for
// the mean (count null: 1).
template <typename T, bool kInplace>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_rows_kernel(const T* x, T* grad, int64_t ld, const int64_t* target, int64_t rows, int64_t V,
                              int64_t ignore_index, Acc<T> eps, const double* count, T* loss_none,
                              Acc<T>* row_loss, Acc<T>* lse_out) {
  using A = Acc<T>;
  const A uniform = eps / A(V);
  const A scale = count ? A(1.0 / *count) : A(1);
  int64_t t_next = blockIdx.x < rows ? target[blockIdx.x] : 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = t_next;
    if (r + gridDim.x < rows)
      t_next = target[r + gridDim.x];  // the next row's, loaded while this one streams
    const T* row = x + r * ld;
    A loss = 0;
    // BEGIN SOLUTION
    const bool ignored = t == ignore_index, valid = t >= 0 && t < V;
    if (kInplace && ignored) {
      row_fill(grad + r * ld, V, A(0));  // no gradient, and no need to read the row
    } else {
      const A xt = threadIdx.x == 0 && valid ? to_acc(row[t]) : A(0);  // in flight during pass 1
      A m = ce_neg_inf<A>(), s = 0, sx = 0;
      row_partial(row, V, m, s, sx);
      block_merge(m, s, sx);
      const A lse = m + ce_log(s);
      if (threadIdx.x == 0) {
        loss = ignored ? A(0) : valid ? ce_loss(m, s, sx, xt, eps, V) : A(NAN);
        if (lse_out) lse_out[r] = lse;
      }
      if (kInplace && valid)
        row_map(row, grad + r * ld, V,
                [=](A v, int64_t j) { return ce_grad(v, lse, j == t, eps, uniform, scale); });
      else if (kInplace)
        row_fill(grad + r * ld, V, A(NAN));
    }
    // END SOLUTION
    if (threadIdx.x == 0) {
      if (loss_none)
        loss_none[r] = from_acc<T>(loss);
      else
        row_loss[r] = loss;
    }
  }
}

// The rows' losses into one: their sum in a fixed order (in double), divided by *count for the mean.
template <typename T>
__global__ void cross_entropy_finish_kernel(const Acc<T>* row_loss, int64_t rows, const double* count,
                                            T* loss) {
  double sum[1] = {0};
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum[0] += row_loss[r];
  block_sum(sum);
  if (threadIdx.x == 0) *loss = from_acc<T>(Acc<T>(count ? sum[0] / *count : sum[0]));  // mean of none: NaN
}

template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_backward_kernel(const T* grad_loss, int64_t grad_loss_step, const T* x, int64_t ld,
                                  const int64_t* target, const Acc<T>* lse, T* grad, int64_t rows, int64_t V,
                                  int64_t ignore_index, Acc<T> eps, const double* count) {
  using A = Acc<T>;
  const A uniform = eps / A(V);
  const A inv_count = count ? A(1.0 / *count) : A(1);
  // A row's target, lse and incoming gradient: the next row's are loaded while this one streams.
  int64_t t_next = 0;
  A lse_next = 0, g_next = 0;
  const auto prefetch = [&](int64_t r) {
    if (r >= rows) return;
    t_next = target[r];
    lse_next = lse[r];
    g_next = to_acc(grad_loss[r * grad_loss_step]);
  };
  prefetch(blockIdx.x);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = t_next;
    const A row_lse = lse_next, g = g_next;
    prefetch(r + gridDim.x);
    T* out = grad + r * V;
    // BEGIN SOLUTION
    if (t == ignore_index || t < 0 || t >= V) {
      row_fill(out, V, t == ignore_index ? A(0) : A(NAN));
      continue;
    }
    const A scale = g * inv_count;
    row_map(x + r * ld, out, V,
            [=](A v, int64_t j) { return ce_grad(v, row_lse, j == t, eps, uniform, scale); });
    // END SOLUTION
  }
}

template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_scale_kernel(T* grad, int64_t ld, const T* grad_loss, int64_t grad_loss_step, int64_t rows,
                               int64_t V) {
  using A = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const A g = to_acc(grad_loss[r * grad_loss_step]);
    if (g == A(1)) continue;  // the same for the whole block: no barrier is skipped by part of it
    T* row = grad + r * ld;
    row_map(row, row, V, [g](A v, int64_t) { return v * g; });
  }
}

// Threads per row: about kUnroll Packs each, a power of 2 from 64 to `most` (a 128256-long bfloat16 row:
// all). A kernel that reads each row once takes at most kOnePassThreads: two such blocks fit an SM (at 48
// registers a thread), so one streams while the other merges its row's partials, where a single block would
// leave the SM's loads idle for that merge at the end of every row.
constexpr int kOnePassThreads = 512;

template <typename T>
int row_threads(int64_t V, int most) {
  const int64_t want = ceil_div<int64_t>(V, int64_t(kPack16<T>) * kUnroll);
  int threads = 64;
  while (threads < want && threads < most) threads *= 2;
  return threads;
}

// Blocks of `threads` that one SM holds at once, for this kernel on this device (asked once, then
// remembered).
int resident_per_sm(const void* kernel, int threads) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int>, int> known;
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, kernel, threads);
  const auto it = known.find(key);
  if (it != known.end()) return it->second;
  int n = 0;
  COURSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0));
  return known[key] = n > 0 ? n : 1;
}

// Blocks: all that are resident at once (each then loops over rows). A kernel that reads each row twice
// (`reread`, the in-place pass) keeps fewer rows in flight, a whole number per SM, so that they fit in 3/4 of
// L2 and the second read is served from there: a 250 KiB bfloat16 row per SM is 33 MB on 132 SMs, within an
// H100's 50 MB; two per SM would not be.
int64_t row_blocks(const void* kernel, int threads, int64_t rows, int64_t row_bytes, bool reread) {
  int64_t per_sm = resident_per_sm(kernel, threads);
  if (reread) {
    const int64_t l2 = device_attribute<cudaDevAttrL2CacheSize>();
    const int64_t fit = l2 * 3 / 4 / (int64_t(num_sms()) * row_bytes);
    per_sm = fit < 1 ? 1 : (fit < per_sm ? fit : per_sm);
  }
  const int64_t blocks = per_sm * num_sms();
  return blocks < rows ? blocks : rows;
}

}  // namespace

template <typename T>
void cross_entropy_forward_cuda(const T* x, T* grad, int64_t ld, const int64_t* target, int64_t rows,
                                int64_t V, int64_t ignore_index, double eps, int64_t reduction, T* loss,
                                Acc<T>* lse, Acc<T>* row_loss, double* count, cudaStream_t stream) {
  const bool mean = reduction == kReduceMean;
  if (mean) {
    cross_entropy_count_kernel<<<1, kMaxThreads, 0, stream>>>(target, rows, ignore_index, count);
    COURSE_LAUNCH_CHECK();
  }
  const int threads = row_threads<T>(V, grad ? kMaxThreads : kOnePassThreads);
  T* loss_none = reduction == kReduceNone ? loss : nullptr;
  const auto kernel = grad ? cross_entropy_rows_kernel<T, true> : cross_entropy_rows_kernel<T, false>;
  const int64_t blocks = row_blocks(reinterpret_cast<const void*>(kernel), threads, rows,
                                    V * int64_t(sizeof(T)), grad != nullptr);
  kernel<<<blocks, threads, 0, stream>>>(x, grad, ld, target, rows, V, ignore_index, Acc<T>(eps),
                                         grad && mean ? count : nullptr, loss_none, row_loss, lse);
  COURSE_LAUNCH_CHECK();
  if (reduction != kReduceNone) {
    cross_entropy_finish_kernel<T>
        <<<1, kMaxThreads, 0, stream>>>(row_loss, rows, mean ? count : nullptr, loss);
    COURSE_LAUNCH_CHECK();
  }
}

template <typename T>
void cross_entropy_backward_cuda(const T* grad_loss, bool per_row, const T* x, int64_t ld,
                                 const int64_t* target, const Acc<T>* lse, T* grad, int64_t rows, int64_t V,
                                 int64_t ignore_index, double eps, int64_t reduction, double* count,
                                 cudaStream_t stream) {
  const bool mean = reduction == kReduceMean;
  if (mean) {
    cross_entropy_count_kernel<<<1, kMaxThreads, 0, stream>>>(target, rows, ignore_index, count);
    COURSE_LAUNCH_CHECK();
  }
  const int threads = row_threads<T>(V, kMaxThreads);
  const auto kernel = cross_entropy_backward_kernel<T>;
  const int64_t blocks = row_blocks(reinterpret_cast<const void*>(kernel), threads, rows, 0, false);
  kernel<<<blocks, threads, 0, stream>>>(grad_loss, per_row ? 1 : 0, x, ld, target, lse, grad, rows, V,
                                         ignore_index, Acc<T>(eps), mean ? count : nullptr);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void cross_entropy_scale_cuda(T* grad, int64_t ld, const T* grad_loss, bool per_row, int64_t rows, int64_t V,
                              cudaStream_t stream) {
  const int threads = row_threads<T>(V, kMaxThreads);
  const auto kernel = cross_entropy_scale_kernel<T>;
  const int64_t blocks = row_blocks(reinterpret_cast<const void*>(kernel), threads, rows, 0, false);
  kernel<<<blocks, threads, 0, stream>>>(grad, ld, grad_loss, per_row ? 1 : 0, rows, V);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T)                                                                                 \
  template void cross_entropy_forward_cuda<T>(const T*, T*, int64_t, const int64_t*, int64_t, int64_t, \
                                              int64_t, double, int64_t, T*, Acc<T>*, Acc<T>*, double*, \
                                              cudaStream_t);                                           \
  template void cross_entropy_backward_cuda<T>(const T*, bool, const T*, int64_t, const int64_t*,      \
                                               const Acc<T>*, T*, int64_t, int64_t, int64_t, double,   \
                                               int64_t, double*, cudaStream_t);                        \
  template void cross_entropy_scale_cuda<T>(T*, int64_t, const T*, bool, int64_t, int64_t, cudaStream_t);
COURSE_FOR_EACH_DTYPE(INSTANTIATE)
