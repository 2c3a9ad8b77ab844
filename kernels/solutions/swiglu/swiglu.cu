// swiglu.cu: SwiGLU, y = silu(gate) * up over the last dimension's two halves, forward and backward on the
// GPU (lesson 08's capstone: the answer).
//
// Both passes are memory-bound: forward reads x (2h values per row) and writes y (h), backward reads grad_y
// (h) and x (2h) and writes grad_x (2h). One kernel each, every byte moved once, so the limit is a copy of
// the same bytes. The math (swiglu_math.h) runs in float (double for float64) whatever the storage type.
//
//   forward   swiglu_forward_kernel / swiglu_forward_cuda: thread i writes Pack i of y (16 bytes: 4 floats,
//             8 halves) from the Packs of gate and up at the same row and columns.
//   backward  swiglu_backward_kernel / swiglu_backward_cuda: thread i reads Pack i of grad_y and the two
//   Packs
//             of x under it, and writes the two of grad_x; the sigmoid is recomputed from the gate.
//
// A row length h that is not a multiple of the Pack's width, or a tensor not on a 16-byte boundary, takes
// Packs of one element: the same kernels, one value per thread.
#include "swiglu.h"
#include "swiglu_math.h"

namespace {

constexpr int kThreads = 256;

// packs = rows * hp, hp = h / N: the Packs of y. Pack i is in row i / hp, at Pack i % hp of the row; in x the
// row is 2 * hp Packs long, gate first.
template <typename T, int N>
__global__ void swiglu_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t packs, int64_t hp) {
  using P = Pack<T, N>;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= packs) return;
  const int64_t r = i / hp, c = i - r * hp;
  const P* row = reinterpret_cast<const P*>(x) + r * 2 * hp;
  const P g = row[c], u = row[hp + c];
  P out;
#pragma unroll
  for (int k = 0; k < N; ++k) out.v[k] = from_acc<T>(swiglu_y(to_acc(g.v[k]), to_acc(u.v[k])));
  reinterpret_cast<P*>(y)[i] = out;
}

template <typename T, int N>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                       T* __restrict__ grad_x, int64_t packs, int64_t hp) {
  using P = Pack<T, N>;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= packs) return;
  const int64_t r = i / hp, c = i - r * hp;
  const P* row = reinterpret_cast<const P*>(x) + r * 2 * hp;
  const P gy = reinterpret_cast<const P*>(grad_y)[i], g = row[c], u = row[hp + c];
  P gg, gu;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    Acc<T> a, b;
    swiglu_grads(to_acc(gy.v[k]), to_acc(g.v[k]), to_acc(u.v[k]), a, b);
    gg.v[k] = from_acc<T>(a);
    gu.v[k] = from_acc<T>(b);
  }
  P* out = reinterpret_cast<P*>(grad_x) + r * 2 * hp;
  out[c] = gg;
  out[hp + c] = gu;
}

template <typename T, int N>
void forward(const T* x, T* y, int64_t rows, int64_t h, cudaStream_t stream) {
  const int64_t packs = rows * (h / N);
  swiglu_forward_kernel<T, N>
      <<<ceil_div<int64_t>(packs, kThreads), kThreads, 0, stream>>>(x, y, packs, h / N);
  COURSE_LAUNCH_CHECK();
}

template <typename T, int N>
void backward(const T* grad_y, const T* x, T* grad_x, int64_t rows, int64_t h, cudaStream_t stream) {
  const int64_t packs = rows * (h / N);
  swiglu_backward_kernel<T, N>
      <<<ceil_div<int64_t>(packs, kThreads), kThreads, 0, stream>>>(grad_y, x, grad_x, packs, h / N);
  COURSE_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
void swiglu_forward_cuda(const T* x, T* y, int64_t rows, int64_t h, cudaStream_t stream) {
  constexpr int N = kPack16<T>;
  if (h % N == 0 && aligned16(x) && aligned16(y))
    forward<T, N>(x, y, rows, h, stream);
  else
    forward<T, 1>(x, y, rows, h, stream);
}

template <typename T>
void swiglu_backward_cuda(const T* grad_y, const T* x, T* grad_x, int64_t rows, int64_t h,
                          cudaStream_t stream) {
  constexpr int N = kPack16<T>;
  if (h % N == 0 && aligned16(grad_y) && aligned16(x) && aligned16(grad_x))
    backward<T, N>(grad_y, x, grad_x, rows, h, stream);
  else
    backward<T, 1>(grad_y, x, grad_x, rows, h, stream);
}

#define INSTANTIATE(T)                                                                \
  template void swiglu_forward_cuda<T>(const T*, T*, int64_t, int64_t, cudaStream_t); \
  template void swiglu_backward_cuda<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
