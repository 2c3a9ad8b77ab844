// kernels/dropout/dropout.cu: dropout whose mask is never stored (lesson 05). y = x * scale where an element
// is kept, 0 where it is dropped, scale = 1 / (1 - p); element i's fate comes from a counter-based generator
// (kernels/common/philox.cuh) keyed by PyTorch's (seed, offset) and counted by i, so backward recomputes the
// mask from those two numbers instead of reading a saved one: backward is the same kernel run on grad_y.
//
//   v1  dropout_kernel<T, 4, false> / dropout_v1: one thread per group of 4 elements, one Philox call for
//       its 4 keep bits, element loads and stores. Any size and alignment.
//   v2  dropout_kernel<T, N, true> / dropout_v2, the default: each thread loads and stores 16-byte Packs
//       (N = 4 float or double, 8 half or bfloat16: 1 or 2 Philox calls), the loads issued before the
//       Philox rounds so that the memory latency hides behind the arithmetic; the last partial group
//       element by element. v1 where a pointer is not 16-byte aligned.
//
// The mask depends only on (seed, offset, i, p): not on the grid, the version or the device, so the CPU
// loop in dropout.cpp gives the same bits. Block 0's thread 0 writes the (seed, offset) it used to
// state_out: in a captured CUDA graph they are read from PyTorch's device tensors, new at every replay.
#include "dropout.h"

namespace {

constexpr int kThreads = 256;

template <typename T, int N, bool kVector>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, philox::RngState rng,
                   uint64_t threshold, Acc<T> scale, int64_t* __restrict__ state_out) {
  static_assert(N % 4 == 0, "a thread owns whole groups of 4 (one Philox call each)");
  constexpr int PN = 16 / sizeof(T) < N ? 16 / sizeof(T) : N;  // elements per Pack
  using P = Pack<T, PN>;
  uint64_t seed, offset;
  philox::unpack(rng, seed, offset);
  if (state_out != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    state_out[0] = static_cast<int64_t>(seed);
    state_out[1] = static_cast<int64_t>(offset);
  }
  const int64_t first = (blockIdx.x * int64_t(kThreads) + threadIdx.x) * N;
  if (first >= n) return;
  if (kVector && first + N <= n) {
    P p[N / PN];
#pragma unroll
    for (int j = 0; j < N / PN; ++j) p[j] = reinterpret_cast<const P*>(x + first)[j];
    uint32_t bits[N / 4];
#pragma unroll
    for (int g = 0; g < N / 4; ++g) bits[g] = philox::keep_bits4(seed, offset, first / 4 + g, threshold);
#pragma unroll
    for (int j = 0; j < N / PN; ++j) {
#pragma unroll
      for (int k = 0; k < PN; ++k) {
        const int e = j * PN + k;
        const bool kept = (bits[e / 4] >> (e % 4)) & 1u;
        p[j].v[k] = from_acc<T>(kept ? to_acc(p[j].v[k]) * scale : Acc<T>(0));
      }
      reinterpret_cast<P*>(y + first)[j] = p[j];
    }
    return;
  }
#pragma unroll
  for (int g = 0; g < N / 4; ++g) {
    const int64_t base = first + 4 * g;
    if (base >= n) break;
    const uint32_t bits = philox::keep_bits4(seed, offset, base / 4, threshold);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (base + k < n) y[base + k] = from_acc<T>((bits >> k) & 1u ? to_acc(x[base + k]) * scale : Acc<T>(0));
  }
}

template <typename T, int N, bool kVector>
void launch_dropout(const T* x, T* y, int64_t n, philox::RngState rng, uint64_t threshold, Acc<T> scale,
                    int64_t* state_out, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = ceil_div(ceil_div(n, int64_t(N)), int64_t(kThreads));
  dropout_kernel<T, N, kVector><<<blocks, kThreads, 0, stream>>>(x, y, n, rng, threshold, scale, state_out);
  COURSE_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
void dropout_v1(const T* x, T* y, int64_t n, philox::RngState rng, uint64_t threshold, Acc<T> scale,
                int64_t* state_out, cudaStream_t stream) {
  launch_dropout<T, 4, false>(x, y, n, rng, threshold, scale, state_out, stream);
}

template <typename T>
void dropout_v2(const T* x, T* y, int64_t n, philox::RngState rng, uint64_t threshold, Acc<T> scale,
                int64_t* state_out, cudaStream_t stream) {
  constexpr int N = kPack16<T> > 4 ? kPack16<T> : 4;
  if (aligned16(x) && aligned16(y))
    launch_dropout<T, N, true>(x, y, n, rng, threshold, scale, state_out, stream);
  else
    dropout_v1(x, y, n, rng, threshold, scale, state_out, stream);
}

#define INSTANTIATE(T)                                                                             \
  template void dropout_v1<T>(const T*, T*, int64_t, philox::RngState, uint64_t, Acc<T>, int64_t*, \
                              cudaStream_t);                                                       \
  template void dropout_v2<T>(const T*, T*, int64_t, philox::RngState, uint64_t, Acc<T>, int64_t*, \
                              cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
