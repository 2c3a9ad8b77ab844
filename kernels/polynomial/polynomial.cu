// kernels/polynomial/polynomial.cu: y = a*x^3 + b*x^2 + c*x + d, forward and backward (lesson 01).
//
// Native PyTorch runs this as 7 kernels, each a full pass over memory; one kernel reads x once and
// writes y once, so its speed limit is a copy of the same bytes. The versions (kernel / launcher), in
// the order lesson 01 builds them; numbers never change:
//
//   forward v1   poly_forward_v1_kernel / poly_forward_v1: one thread per element; exercise 1, the
//                kernel and its launcher (kernels/exercises/polynomial_forward.cuh, compiled by
//                polynomial.exercises.cu).
//   forward v2   forward_v2_kernel / poly_forward_v2: one 16-byte Pack per thread (4 floats, 8 bf16s):
//                a quarter to an eighth of v1's memory instructions, so more bytes in flight per SM.
//   backward v1  poly_backward_v1_kernel / poly_backward_v1: grad_x only, one thread per element.
//   backward v2  backward_v2_kernel + sum_partials_kernel / poly_backward_v2: 16-byte Packs, two per
//                thread in flight, and the coefficient gradients summed in the same pass (per block,
//                then by one block in a fixed order): no second pass, no atomics, the same bits every run.
//                poly_backward_v2_blocks sizes the partial-sum buffer the .cpp allocates.
//
// Everything is computed in Acc<T> (float, double for double inputs) and stored as T. Timed by
// benchmarks/polynomial.py.
#include "polynomial.h"

namespace {

constexpr int kThreads = 256;

template <typename acc_t>
struct Coeffs {
  acc_t a, b, c, d;
  __device__ explicit Coeffs(const acc_t* p) : a(p[0]), b(p[1]), c(p[2]), d(p[3]) {}
  __device__ acc_t y(acc_t x) const { return ((a * x + b) * x + c) * x + d; }
  __device__ acc_t dydx(acc_t x) const { return (3 * a * x + 2 * b) * x + c; }
};

// Backward v1: thread i writes grad_x[i] = grad_y[i] * dy/dx at x[i] (the chain rule); the last block runs
// partly past the end, so threads past n return.
template <typename T>
__global__ void poly_backward_v1_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                        const Acc<T>* __restrict__ coeffs, T* __restrict__ grad_x,
                                        int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const Coeffs<Acc<T>> c(coeffs);
  grad_x[i] = from_acc<T>(to_acc(grad_y[i]) * c.dydx(to_acc(x[i])));
}

// v2: thread i handles Pack i (N elements); the n % N leftover elements go to the first threads.
template <typename T, int N>
__global__ void forward_v2_kernel(const T* __restrict__ x, const Acc<T>* __restrict__ coeffs,
                                  T* __restrict__ y, int64_t n) {
  using P = Pack<T, N>;
  const Coeffs<Acc<T>> c(coeffs);
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t packs = n / N;
  if (i < packs) {
    P p = reinterpret_cast<const P*>(x)[i];
#pragma unroll
    for (int k = 0; k < N; ++k) p.v[k] = from_acc<T>(c.y(to_acc(p.v[k])));
    reinterpret_cast<P*>(y)[i] = p;
  }
  const int64_t t = packs * N + i;
  if (i < N && t < n) y[t] = from_acc<T>(c.y(to_acc(x[t])));
}

// v2 backward: each thread loads U Packs of grad_y and of x before computing any (2U 16-byte loads in
// flight), and the grid is capped so that a thread accumulates several Packs of the coefficient sums in
// registers before the one block reduction. The n % N leftover elements go to block 0.
template <typename T, int N, int U, bool kCoeffGrad>
__global__ void backward_v2_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                   const Acc<T>* __restrict__ coeffs, T* __restrict__ grad_x,
                                   Acc<T>* __restrict__ partials, int64_t n) {
  using acc_t = Acc<T>;
  using P = Pack<T, N>;
  const Coeffs<acc_t> c(coeffs);
  acc_t s[4] = {0, 0, 0, 0};  // sums of g*x^3, g*x^2, g*x, g: the gradients of a, b, c, d
  auto one = [&](acc_t xv, acc_t g) {
    if (kCoeffGrad) {
      const acc_t gx = g * xv;
      s[3] += g;
      s[2] += gx;
      s[1] += gx * xv;
      s[0] += gx * xv * xv;
    }
    return g * c.dydx(xv);
  };
  const int64_t packs = n / N;
  const int64_t chunk = int64_t(blockDim.x) * U;
  for (int64_t base = blockIdx.x * chunk; base < packs; base += int64_t(gridDim.x) * chunk) {
    P g[U], xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * blockDim.x + threadIdx.x;
      if (i < packs) {
        g[u] = reinterpret_cast<const P*>(grad_y)[i];
        xv[u] = reinterpret_cast<const P*>(x)[i];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * blockDim.x + threadIdx.x;
      if (i < packs) {
        P out;
#pragma unroll
        for (int k = 0; k < N; ++k) out.v[k] = from_acc<T>(one(to_acc(xv[u].v[k]), to_acc(g[u].v[k])));
        reinterpret_cast<P*>(grad_x)[i] = out;
      }
    }
  }
  const int64_t t = packs * N + threadIdx.x;
  if (blockIdx.x == 0 && t < n) grad_x[t] = from_acc<T>(one(to_acc(x[t]), to_acc(grad_y[t])));
  if (kCoeffGrad) {
    block_sum(s);
    if (threadIdx.x == 0)
      for (int k = 0; k < 4; ++k) partials[blockIdx.x * 4 + k] = s[k];
  }
}

// One block of 1024 threads adds the [rows, 4] partial sums. Thread t reads flat elements t, t + 1024,
// ... (coalesced), which all belong to coefficient t % 4; lanes with the same t % 4 are then combined
// with shuffles. The order is fixed, so the result is the same on every run.
template <typename acc_t>
__global__ void sum_partials_kernel(const acc_t* __restrict__ partials, int rows, acc_t* __restrict__ out) {
  __shared__ acc_t warp_sums[32][4];
  acc_t v = 0;
  for (int i = threadIdx.x; i < rows * 4; i += blockDim.x) v += partials[i];
  for (int off = 16; off >= 4; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane < 4) warp_sums[warp][lane] = v;
  __syncthreads();
  if (threadIdx.x < 4) {
    acc_t total = 0;
    for (int w = 0; w < int(blockDim.x / 32); ++w) total += warp_sums[w][threadIdx.x];
    out[threadIdx.x] = total;
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Launchers. The .cpp guarantees n > 0, and that every pointer is on the current device.
// ------------------------------------------------------------------------------------------------

template <typename T>
void poly_backward_v1(const T* grad_y, const T* x, const Acc<T>* coeffs, T* grad_x, int64_t n,
                      cudaStream_t stream) {
  poly_backward_v1_kernel<T>
      <<<ceil_div<int64_t>(n, kThreads), kThreads, 0, stream>>>(grad_y, x, coeffs, grad_x, n);
  COURSE_LAUNCH_CHECK();
}

template <typename T>
void poly_forward_v2(const T* x, const Acc<T>* coeffs, T* y, int64_t n, cudaStream_t stream) {
  if (aligned16(x) && aligned16(y)) {
    constexpr int N = kPack16<T>;
    const int64_t packs_grid = ceil_div<int64_t>(n / N, kThreads);
    const int64_t grid = packs_grid > 0 ? packs_grid : 1;  // n < N still needs one block for the tail
    forward_v2_kernel<T, N><<<grid, kThreads, 0, stream>>>(x, coeffs, y, n);
  } else {
    forward_v2_kernel<T, 1><<<ceil_div<int64_t>(n, kThreads), kThreads, 0, stream>>>(x, coeffs, y, n);
  }
  COURSE_LAUNCH_CHECK();
}

constexpr int kUnroll = 2;        // Packs per thread per step in backward v2
constexpr int kBlocksPerSm = 32;  // cap on backward v2's grid, in blocks per SM

// An upper bound on backward v2's grid (computed for Packs of one element), so the .cpp can size the
// partial-sums buffer without knowing the dtype or the alignment.
int poly_backward_v2_blocks(int64_t n) {
  const int64_t want = ceil_div<int64_t>(n, int64_t(kThreads) * kUnroll);
  const int64_t cap = int64_t(num_sms()) * kBlocksPerSm;
  return int(want < 1 ? 1 : (want < cap ? want : cap));
}

template <typename T, int N, bool kCoeffGrad>
void launch_backward_v2(const T* grad_y, const T* x, const Acc<T>* coeffs, T* grad_x, Acc<T>* partials,
                        Acc<T>* grad_coeffs, int64_t n, cudaStream_t stream) {
  const int64_t want = ceil_div<int64_t>(n / N, int64_t(kThreads) * kUnroll);
  const int64_t cap = int64_t(num_sms()) * kBlocksPerSm;
  const int blocks = int(want < 1 ? 1 : (want < cap ? want : cap));
  backward_v2_kernel<T, N, kUnroll, kCoeffGrad>
      <<<blocks, kThreads, 0, stream>>>(grad_y, x, coeffs, grad_x, partials, n);
  COURSE_LAUNCH_CHECK();
  if (kCoeffGrad) {
    sum_partials_kernel<Acc<T>><<<1, 1024, 0, stream>>>(partials, blocks, grad_coeffs);
    COURSE_LAUNCH_CHECK();
  }
}

template <typename T>
void poly_backward_v2(const T* grad_y, const T* x, const Acc<T>* coeffs, T* grad_x, Acc<T>* partials,
                      Acc<T>* grad_coeffs, int64_t n, cudaStream_t stream) {
  const bool vec = aligned16(grad_y) && aligned16(x) && aligned16(grad_x);
  constexpr int N = kPack16<T>;
  if (grad_coeffs && vec)
    launch_backward_v2<T, N, true>(grad_y, x, coeffs, grad_x, partials, grad_coeffs, n, stream);
  else if (grad_coeffs)
    launch_backward_v2<T, 1, true>(grad_y, x, coeffs, grad_x, partials, grad_coeffs, n, stream);
  else if (vec)
    launch_backward_v2<T, N, false>(grad_y, x, coeffs, grad_x, partials, grad_coeffs, n, stream);
  else
    launch_backward_v2<T, 1, false>(grad_y, x, coeffs, grad_x, partials, grad_coeffs, n, stream);
}

#define INSTANTIATE(T)                                                                                \
  template void poly_backward_v1<T>(const T*, const T*, const Acc<T>*, T*, int64_t, cudaStream_t);    \
  template void poly_forward_v2<T>(const T*, const Acc<T>*, T*, int64_t, cudaStream_t);               \
  template void poly_backward_v2<T>(const T*, const T*, const Acc<T>*, T*, Acc<T>*, Acc<T>*, int64_t, \
                                    cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
