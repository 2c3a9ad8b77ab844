// batchnorm_relu_backward.cu: the backward of course::batchnorm_relu on the GPU (lesson 09's practice set:
// the answer); batchnorm_relu.cu's header says how the work is cut, and batchnorm_relu_math.h has the
// formula.
//
//   backward_sums_nchw_kernel / _cl_kernel   a block's sum(g) and sum(g * (x - mean)) per channel of its
//   chunk,
//                                            g = grad_y * (y > 0): the forward's chunks, two sums for a
//                                            Welford state
//   backward_finalize_kernel                 the partials added in a fixed order -> grad_bias, grad_weight
//   backward_apply_nchw_kernel / _cl_kernel  grad_x = k * g + p * (x - mean) + q, walking the chunks in
//   reverse launched by batchnorm_relu_backward_cuda; batchnorm_relu_backward_plan_cuda cuts the channels
#include "batchnorm_relu_device.cuh"
#include "norm_engine/occupancy.h"

using namespace bn;

namespace {

// ------------------------------------------------------------------------------------------------
// Backward
// ------------------------------------------------------------------------------------------------

// sum(g) and sum(g * (x - mean)) of a block's chunk (stats_nchw_kernel's chunks): part holds 2 arrays.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    backward_sums_nchw_kernel(const T* __restrict__ grad_y, const T* __restrict__ y, const T* __restrict__ x,
                              const Acc<T>* __restrict__ mean, Acc<T>* __restrict__ part, int64_t C,
                              int64_t HWp, int64_t Mp, int64_t chunk, int64_t partials) {
  using A = Acc<T>;
  using P = Pack<T, V>;
  wait_for_previous_grid();
  const int64_t c = blockIdx.x % C, s = blockIdx.x / C;
  const int64_t k0 = s * chunk, k1 = min(Mp, k0 + chunk);
  const A m = mean[c];
  A sums[2] = {A(0), A(0)};  // sum(g), sum(g * (x - mean)): this thread's, then (thread 0) the block's
  A sg[V] = {}, sgx[V] = {};
  const P *gp = reinterpret_cast<const P*>(grad_y), *yp = reinterpret_cast<const P*>(y),
          *xp = reinterpret_cast<const P*>(x);
  int64_t k = k0 + threadIdx.x;
  ChannelWalk walk(k, kThreads, c, C, HWp);
  for (; k < k1; k += kUnrollBackward * kThreads) {
    P gv[kUnrollBackward], yv[kUnrollBackward], xv[kUnrollBackward];
#pragma unroll
    for (int u = 0; u < kUnrollBackward; ++u) {
      if (k + u * kThreads < k1) gv[u] = gp[walk.off], yv[u] = yp[walk.off], xv[u] = xp[walk.off];
      walk.next();
    }
#pragma unroll
    for (int u = 0; u < kUnrollBackward; ++u)
      if (k + u * kThreads < k1) {
        const Values<T, V> gy = values(gv[u]), yy = values(yv[u]), xx = values(xv[u]);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A g = yy.v[j] > A(0) ? gy.v[j] : A(0);
          sg[j] += g;
          sgx[j] += g * (xx.v[j] - m);
        }
      }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) sums[0] += sg[j], sums[1] += sgx[j];
  allow_next_grid();
  block_sum<A, 2>(sums);
  if (threadIdx.x == 0) {
    part[s * C + c] = sums[0];
    part[partials + s * C + c] = sums[1];
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    backward_sums_cl_kernel(const T* __restrict__ grad_y, const T* __restrict__ y, const T* __restrict__ x,
                            const Acc<T>* __restrict__ mean, Acc<T>* __restrict__ part, int64_t M, int64_t C,
                            int64_t groups, int64_t chunk, int64_t partials) {
  using A = Acc<T>;
  using P = Pack<T, V>;
  wait_for_previous_grid();
  const int64_t g = blockIdx.x % groups, s = blockIdx.x / groups;
  const int64_t Cp = C / V, cp = g * blockDim.x + threadIdx.x;
  const int64_t r0 = s * chunk, r1 = min(M, r0 + chunk);
  const int TY = blockDim.y;
  A sums[2 * V] = {};  // sum(g) of slot j at j, sum(g * (x - mean)) at V + j
  if (cp < Cp) {
    A m[V];
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = mean[cp * V + j];
    const P *gp = reinterpret_cast<const P*>(grad_y) + cp, *yp = reinterpret_cast<const P*>(y) + cp,
            *xp = reinterpret_cast<const P*>(x) + cp;
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kUnrollBackward * TY) {
      P gv[kUnrollBackward], yv[kUnrollBackward], xv[kUnrollBackward];
#pragma unroll
      for (int u = 0; u < kUnrollBackward; ++u)
        if (r + u * TY < r1) {
          const int64_t at = (r + u * TY) * Cp;
          gv[u] = gp[at], yv[u] = yp[at], xv[u] = xp[at];
        }
#pragma unroll
      for (int u = 0; u < kUnrollBackward; ++u)
        if (r + u * TY < r1) {
          const Values<T, V> gy = values(gv[u]), yy = values(yv[u]), xx = values(xv[u]);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const A gr = yy.v[j] > A(0) ? gy.v[j] : A(0);
            sums[j] += gr;
            sums[V + j] += gr * (xx.v[j] - m[j]);
          }
        }
    }
  }
  allow_next_grid();
  column_sums<A, 2 * V>(sums);
  if (threadIdx.y == 0 && cp < Cp)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t at = s * C + cp * V + j;
      part[at] = sums[j];
      part[partials + at] = sums[V + j];
    }
}

// grad_bias = sum(g), grad_weight = rstd * sum(g * (x - mean)): the partials added in a fixed order.
template <typename A>
__global__ void __launch_bounds__(kFinCols* kFinLanes)
    backward_finalize_kernel(const A* __restrict__ part, int64_t splits, int64_t C, int64_t partials,
                             const A* __restrict__ rstd, A* __restrict__ grad_weight,
                             A* __restrict__ grad_bias) {
  wait_for_previous_grid();
  __shared__ A sh[2][kFinLanes][kFinCols];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = blockIdx.x * int64_t(kFinCols) + tx;
  A sg = A(0), sgx = A(0);
  if (c < C)
#pragma unroll 4
    for (int64_t s = ty; s < splits; s += kFinLanes) sg += part[s * C + c], sgx += part[partials + s * C + c];
  allow_next_grid();
  for (int h = kFinLanes / 2; h > 0; h /= 2) {
    if (ty >= h && ty < 2 * h) sh[0][ty][tx] = sg, sh[1][ty][tx] = sgx;
    __syncthreads();
    if (ty < h) sg += sh[0][ty + h][tx], sgx += sh[1][ty + h][tx];
    __syncthreads();
  }
  if (ty == 0 && c < C) {
    grad_bias[c] = sg;
    grad_weight[c] = rstd[c] * sgx;
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    backward_apply_nchw_kernel(const T* __restrict__ grad_y, const T* __restrict__ y, const T* __restrict__ x,
                               const Acc<T>* __restrict__ weight, const Acc<T>* __restrict__ mean,
                               const Acc<T>* __restrict__ rstd, const Acc<T>* __restrict__ grad_weight,
                               const Acc<T>* __restrict__ grad_bias, T* __restrict__ grad_x, int64_t C,
                               int64_t HWp, int64_t Mp, int64_t chunk, Acc<T> M) {
  using A = Acc<T>;
  using P = Pack<T, V>;
  wait_for_previous_grid();  // grad_weight and grad_bias are written
  const int64_t b = int64_t(gridDim.x) - 1 - blockIdx.x;
  const int64_t c = b % C, s = b / C;
  const int64_t k0 = s * chunk, k1 = min(Mp, k0 + chunk);
  const A m = mean[c];
  const BnGrad<A> coef = bn_grad_coefficients(weight[c], rstd[c], grad_bias[c], grad_weight[c], M);
  const P *gp = reinterpret_cast<const P*>(grad_y), *yp = reinterpret_cast<const P*>(y),
          *xp = reinterpret_cast<const P*>(x);
  P* out = reinterpret_cast<P*>(grad_x);
  int64_t k = k0 + threadIdx.x;
  ChannelWalk walk(k, kThreads, c, C, HWp);
  for (; k < k1; k += kUnrollBackward * kThreads) {
    int64_t off[kUnrollBackward];
    P gv[kUnrollBackward], yv[kUnrollBackward], xv[kUnrollBackward];
#pragma unroll
    for (int u = 0; u < kUnrollBackward; ++u) {
      off[u] = walk.off;
      if (k + u * kThreads < k1)
        gv[u] = load_last_use(gp + off[u]), yv[u] = load_last_use(yp + off[u]),
        xv[u] = load_last_use(xp + off[u]);
      walk.next();
    }
#pragma unroll
    for (int u = 0; u < kUnrollBackward; ++u)
      if (k + u * kThreads < k1) {
        const Values<T, V> gy = values(gv[u]), yy = values(yv[u]), xx = values(xv[u]);
        P o;
#pragma unroll
        for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>(bn_grad_x(gy.v[j], yy.v[j], xx.v[j], m, coef));
        store_streaming(out + off[u], o);
      }
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    backward_apply_cl_kernel(const T* __restrict__ grad_y, const T* __restrict__ y, const T* __restrict__ x,
                             const Acc<T>* __restrict__ weight, const Acc<T>* __restrict__ mean,
                             const Acc<T>* __restrict__ rstd, const Acc<T>* __restrict__ grad_weight,
                             const Acc<T>* __restrict__ grad_bias, T* __restrict__ grad_x, int64_t M,
                             int64_t C, int64_t groups, int64_t chunk) {
  using A = Acc<T>;
  using P = Pack<T, V>;
  wait_for_previous_grid();
  const int64_t b = int64_t(gridDim.x) - 1 - blockIdx.x;
  const int64_t g = b % groups, s = b / groups;
  const int64_t Cp = C / V, cp = g * blockDim.x + threadIdx.x;
  if (cp >= Cp) return;
  const int64_t r0 = s * chunk, r1 = min(M, r0 + chunk);
  const int TY = blockDim.y;
  A m[V];
  BnGrad<A> coef[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int64_t c = cp * V + j;
    m[j] = mean[c];
    coef[j] = bn_grad_coefficients(weight[c], rstd[c], grad_bias[c], grad_weight[c], A(M));
  }
  const P *gp = reinterpret_cast<const P*>(grad_y) + cp, *yp = reinterpret_cast<const P*>(y) + cp,
          *xp = reinterpret_cast<const P*>(x) + cp;
  P* out = reinterpret_cast<P*>(grad_x) + cp;
  for (int64_t r = r0 + threadIdx.y; r < r1; r += kUnrollBackward * TY) {
    P gv[kUnrollBackward], yv[kUnrollBackward], xv[kUnrollBackward];
#pragma unroll
    for (int u = 0; u < kUnrollBackward; ++u)
      if (r + u * TY < r1) {
        const int64_t at = (r + u * TY) * Cp;
        gv[u] = load_last_use(gp + at), yv[u] = load_last_use(yp + at), xv[u] = load_last_use(xp + at);
      }
#pragma unroll
    for (int u = 0; u < kUnrollBackward; ++u)
      if (r + u * TY < r1) {
        const Values<T, V> gy = values(gv[u]), yy = values(yv[u]), xx = values(xv[u]);
        P o;
#pragma unroll
        for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>(bn_grad_x(gy.v[j], yy.v[j], xx.v[j], m[j], coef[j]));
        store_streaming(out + (r + u * TY) * Cp, o);
      }
  }
}

// ------------------------------------------------------------------------------------------------
// Launcher
// ------------------------------------------------------------------------------------------------

template <typename T, int V>
void backward(const T* grad_y, const T* y, const T* x, const Acc<T>* weight, const Acc<T>* mean,
              const Acc<T>* rstd, T* grad_x, Acc<T>* grad_weight, Acc<T>* grad_bias, Acc<T>* part,
              const BnPlan& p, int64_t N, int64_t C, int64_t HW, cudaStream_t stream) {
  const LaunchOptions pdl{false, kPdl, 1};
  const dim3 grid(unsigned(p.groups * p.splits)), block(p.tx, p.ty);
  const int64_t M = N * HW;
  if (p.channels_last)
    launch(backward_sums_cl_kernel<T, V>, grid, block, 0, stream, pdl, grad_y, y, x, mean, part, M, C,
           p.groups, p.chunk, p.partials);
  else
    launch(backward_sums_nchw_kernel<T, V>, grid, block, 0, stream, pdl, grad_y, y, x, mean, part, C, HW / V,
           M / V, p.chunk, p.partials);
  COURSE_LAUNCH_CHECK();
  launch(backward_finalize_kernel<Acc<T>>, dim3(unsigned(ceil_div<int64_t>(C, kFinCols))),
         dim3(kFinCols, kFinLanes), 0, stream, pdl, part, p.splits, C, p.partials, rstd, grad_weight,
         grad_bias);
  COURSE_LAUNCH_CHECK();
  if (p.channels_last)
    launch(backward_apply_cl_kernel<T, V>, grid, block, 0, stream, pdl, grad_y, y, x, weight, mean, rstd,
           grad_weight, grad_bias, grad_x, M, C, p.groups, p.chunk);
  else
    launch(backward_apply_nchw_kernel<T, V>, grid, block, 0, stream, pdl, grad_y, y, x, weight, mean, rstd,
           grad_weight, grad_bias, grad_x, C, HW / V, M / V, p.chunk, Acc<T>(M));
  COURSE_LAUNCH_CHECK();
}

template <typename T, int V>
int sums_blocks_per_sm(bool channels_last) {
  const void* kernel = channels_last ? reinterpret_cast<const void*>(&backward_sums_cl_kernel<T, V>)
                                     : reinterpret_cast<const void*>(&backward_sums_nchw_kernel<T, V>);
  return norm_engine::blocks_per_sm(kernel, kThreads, 0);
}

}  // namespace

template <typename T>
BnPlan batchnorm_relu_backward_plan_cuda(int64_t N, int64_t C, int64_t HW, bool channels_last,
                                         bool vectorized) {
  constexpr int kVec = kPack16<T>;
  const int per_sm =
      vectorized ? sums_blocks_per_sm<T, kVec>(channels_last) : sums_blocks_per_sm<T, 1>(channels_last);
  return plan(N, C, HW, channels_last, vectorized ? kVec : 1, per_sm);
}

template <typename T>
void batchnorm_relu_backward_cuda(const T* grad_y, const T* y, const T* x, const Acc<T>* weight,
                                  const Acc<T>* mean, const Acc<T>* rstd, T* grad_x, Acc<T>* grad_weight,
                                  Acc<T>* grad_bias, Acc<T>* workspace, const BnPlan& plan, int64_t N,
                                  int64_t C, int64_t HW, cudaStream_t stream) {
  if (plan.vec > 1)
    backward<T, kPack16<T>>(grad_y, y, x, weight, mean, rstd, grad_x, grad_weight, grad_bias, workspace, plan,
                            N, C, HW, stream);
  else
    backward<T, 1>(grad_y, y, x, weight, mean, rstd, grad_x, grad_weight, grad_bias, workspace, plan, N, C,
                   HW, stream);
}

#define INSTANTIATE(T)                                                                                       \
  template BnPlan batchnorm_relu_backward_plan_cuda<T>(int64_t, int64_t, int64_t, bool, bool);               \
  template void batchnorm_relu_backward_cuda<T>(const T*, const T*, const T*, const Acc<T>*, const Acc<T>*,  \
                                                const Acc<T>*, T*, Acc<T>*, Acc<T>*, Acc<T>*, const BnPlan&, \
                                                int64_t, int64_t, int64_t, cudaStream_t);
COURSE_FOR_EACH_DTYPE(INSTANTIATE)
