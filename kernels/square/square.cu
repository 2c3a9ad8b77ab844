// kernels/square/square.cu: y = x * x and its backward grad_x = 2 * x * grad_y (lesson 02b's exercise op:
// you write its glue, which calls these launchers).
//
//   square v2   square_forward_v2_kernel / square_backward_v2_kernel, launched by square_forward_v2 /
//               square_backward_v2: one 16-byte Pack per thread (lesson 01's forward v2). A quarter to an
//               eighth of the memory instructions of one thread per element for the same bytes, so more
//               bytes in flight per SM.
//
// Everything is computed in Acc<T> (float, double for double inputs) and stored as T. Each launcher runs on
// the stream it is given and checks the launch; an input or output that is not 16-byte aligned (a view at an
// odd offset) takes the one-value-per-thread kernel.
#include <algorithm>

#include "square.h"

namespace {

constexpr int kThreads = 256;

// Thread i handles Pack i (N elements); the n % N leftover elements go to the first threads.
template <typename T, int N>
__global__ void square_forward_v2_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  using P = Pack<T, N>;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n / N) {
    P p = reinterpret_cast<const P*>(x)[i];
#pragma unroll
    for (int k = 0; k < N; ++k) p.v[k] = from_acc<T>(to_acc(p.v[k]) * to_acc(p.v[k]));
    reinterpret_cast<P*>(y)[i] = p;
  }
  const int64_t t = n / N * N + i;
  if (i < N && t < n) y[t] = from_acc<T>(to_acc(x[t]) * to_acc(x[t]));
}

template <typename T, int N>
__global__ void square_backward_v2_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                          T* __restrict__ grad_x, int64_t n) {
  using P = Pack<T, N>;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n / N) {
    const P g = reinterpret_cast<const P*>(grad_y)[i];
    P p = reinterpret_cast<const P*>(x)[i];
#pragma unroll
    for (int k = 0; k < N; ++k) p.v[k] = from_acc<T>(2 * to_acc(p.v[k]) * to_acc(g.v[k]));
    reinterpret_cast<P*>(grad_x)[i] = p;
  }
  const int64_t t = n / N * N + i;
  if (i < N && t < n) grad_x[t] = from_acc<T>(2 * to_acc(x[t]) * to_acc(grad_y[t]));
}

// Blocks for n / N Packs, and at least one for the tail.
template <int N>
int64_t blocks(int64_t n) {
  return std::max<int64_t>(1, ceil_div<int64_t>(n / N, kThreads));
}

}  // namespace

template <typename T>
void square_forward_v2(const T* x, T* y, int64_t n, cudaStream_t stream) {
  constexpr int N = kPack16<T>;
  if (aligned16(x) && aligned16(y))
    square_forward_v2_kernel<T, N><<<blocks<N>(n), kThreads, 0, stream>>>(x, y, n);
  else
    square_forward_v2_kernel<T, 1><<<blocks<1>(n), kThreads, 0, stream>>>(x, y, n);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void square_backward_v2(const T* grad_y, const T* x, T* grad_x, int64_t n, cudaStream_t stream) {
  constexpr int N = kPack16<T>;
  if (aligned16(grad_y) && aligned16(x) && aligned16(grad_x))
    square_backward_v2_kernel<T, N><<<blocks<N>(n), kThreads, 0, stream>>>(grad_y, x, grad_x, n);
  else
    square_backward_v2_kernel<T, 1><<<blocks<1>(n), kThreads, 0, stream>>>(grad_y, x, grad_x, n);
  COURSE_LAUNCH_CHECK();
}

#define INSTANTIATE(T)                                                     \
  template void square_forward_v2<T>(const T*, T*, int64_t, cudaStream_t); \
  template void square_backward_v2<T>(const T*, const T*, T*, int64_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
