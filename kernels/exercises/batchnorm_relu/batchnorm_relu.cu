// batchnorm_relu.cu: fused BatchNorm + ReLU in training, the forward on the GPU, for NCHW and channels-last x
// alike (lesson 09's practice set: the answer). The math is batchnorm_relu_math.h's; the backward is in
// batchnorm_relu_backward.cu, and what both share (loads, merges, the plan) in batchnorm_relu_device.cuh.
//
// The reduction is the lesson. A channel's M = N * H * W values are N runs of H * W contiguous values (NCHW),
// or a column of the [M, C] matrix that a channels-last x is. At N = 32, H = W = 56 there are 256 channels of
// 100,352 values, far too few channels for one block each to fill 132 SMs: each channel is cut into `splits`
// chunks, one block each (bn::plan picks how many: bn::best_splits), and every block writes a partial (a
// Welford state); a small kernel merges a channel's partials in a fixed order (the same bits on every run),
// and the elementwise pass follows.
//
//   stats_nchw_kernel / stats_cl_kernel    a block's Welford partial per channel of its chunk
//   finalize_kernel                        partials -> mean, rstd; running statistics updated
//   apply_nchw_kernel / apply_cl_kernel    y = relu((x - mean) * rstd * weight + bias)
//   launched by batchnorm_relu_forward_cuda; batchnorm_relu_forward_plan_cuda cuts the channels
//
// Bytes: the forward reads x twice (statistics, then y) and writes y. The elementwise kernels walk the blocks
// in the reverse order of the reductions, so they start on the values the reduction read last, still in L2
// (50 MB on the H100 and H200), and their loads and stores are evict-first (__ldcs, __stcs) so that what they
// stream past does not push those values out. The three kernels launch with programmatic dependent launch
// (common.h): each one's launch overlaps the end of the one before.
//
// 16-byte Packs (4 floats, 8 halves) where H * W (NCHW) or C (channels-last) is a multiple of the Pack's
// width and every tensor is 16-byte aligned; otherwise the same kernels with Packs of one value.
#include "batchnorm_relu_device.cuh"
#include "norm_engine/occupancy.h"

using namespace bn;

namespace {

// ------------------------------------------------------------------------------------------------
// Forward
// ------------------------------------------------------------------------------------------------

// Block b: chunk s = b / C of channel c = b % C, the channel's Packs [s * chunk, (s + 1) * chunk).
// Consecutive blocks take the same chunk of consecutive channels: a round of blocks reads one contiguous
// stretch of x. part: 3 arrays of `partials` values (count, mean, m2), the partial of (s, c) at s * C + c.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    stats_nchw_kernel(const T* __restrict__ x, Acc<T>* __restrict__ part, int64_t C, int64_t HWp, int64_t Mp,
                      int64_t chunk, int64_t partials) {
  using A = Acc<T>;
  using P = Pack<T, V>;
  wait_for_previous_grid();  // (PDL) the kernel before this one, which may have written x, is done
  const int64_t c = blockIdx.x % C, s = blockIdx.x / C;
  const int64_t k0 = s * chunk, k1 = min(Mp, k0 + chunk);
  Welford<A> w{A(0), A(0), A(0)};  // this thread's values, then (thread 0) the block's
  // TODO(exercise): your code here (the solution is 32 lines).
  allow_next_grid();  // finalize_kernel (PDL) may launch: it waits for this grid's end
  w = block_welford(w);
  if (threadIdx.x == 0) {
    part[s * C + c] = w.n;
    part[partials + s * C + c] = w.mean;
    part[2 * partials + s * C + c] = w.m2;
  }
}

// Block b: column group g = b % groups (Packs g * tx .. g * tx + tx - 1 of a row: tx * V channels), rows
// [s * chunk, (s + 1) * chunk) for s = b / groups. Thread (tx, ty) reads its Pack column every ty-th row
// (blockDim.y rows apart): a warp reads whole 16-byte Packs of adjacent channels in a few rows (coalesced).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    stats_cl_kernel(const T* __restrict__ x, Acc<T>* __restrict__ part, int64_t M, int64_t C, int64_t groups,
                    int64_t chunk, int64_t partials) {
  using A = Acc<T>;
  using P = Pack<T, V>;
  wait_for_previous_grid();
  const int64_t g = blockIdx.x % groups, s = blockIdx.x / groups;
  const int64_t Cp = C / V, cp = g * blockDim.x + threadIdx.x;  // this thread's Pack column
  const int64_t r0 = s * chunk, r1 = min(M, r0 + chunk);
  A mean[V] = {}, m2[V] = {}, n = A(0);  // slot j: channel cp * V + j; every slot sees n values
  // TODO(exercise): your code here (the solution is 26 lines).
  allow_next_grid();
  column_welford<A, V>(n, mean, m2);
  if (threadIdx.y == 0 && cp < Cp)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t at = s * C + cp * V + j;
      part[at] = n;
      part[partials + at] = mean[j];
      part[2 * partials + at] = m2[j];
    }
}

// Channel c = blockIdx.x * kFinCols + threadIdx.x: lane threadIdx.y merges partials threadIdx.y, + kFinLanes,
// ... in order, then the lanes merge in a fixed tree. Writes mean and rstd, updates the running statistics.
template <typename A>
__global__ void __launch_bounds__(kFinCols* kFinLanes)
    finalize_kernel(const A* __restrict__ part, int64_t splits, int64_t C, int64_t partials, A momentum,
                    A eps, A* __restrict__ mean, A* __restrict__ rstd, A* __restrict__ running_mean,
                    A* __restrict__ running_var) {
  wait_for_previous_grid();  // the partials are complete
  __shared__ A sh[3][kFinLanes][kFinCols];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = blockIdx.x * int64_t(kFinCols) + tx;
  Welford<A> w{A(0), A(0), A(0)};
  if (c < C)
#pragma unroll 4
    for (int64_t s = ty; s < splits; s += kFinLanes)
      w = welford_merge(
          w, Welford<A>{part[s * C + c], part[partials + s * C + c], part[2 * partials + s * C + c]});
  allow_next_grid();
  for (int h = kFinLanes / 2; h > 0; h /= 2) {
    if (ty >= h && ty < 2 * h) sh[0][ty][tx] = w.n, sh[1][ty][tx] = w.mean, sh[2][ty][tx] = w.m2;
    __syncthreads();
    if (ty < h) w = welford_merge(w, Welford<A>{sh[0][ty + h][tx], sh[1][ty + h][tx], sh[2][ty + h][tx]});
    __syncthreads();
  }
  if (ty == 0 && c < C) {
    mean[c] = w.mean;
    rstd[c] = bn_rstd(w, eps);
    bn_update_running(running_mean[c], running_var[c], w, momentum);
  }
}

// y, in the reverse order of stats_nchw_kernel's blocks (the same chunks): the first blocks here read what
// the last blocks there read, from L2.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    apply_nchw_kernel(const T* __restrict__ x, const Acc<T>* __restrict__ mean,
                      const Acc<T>* __restrict__ rstd, const Acc<T>* __restrict__ weight,
                      const Acc<T>* __restrict__ bias, T* __restrict__ y, int64_t C, int64_t HWp, int64_t Mp,
                      int64_t chunk) {
  using A = Acc<T>;
  using P = Pack<T, V>;
  wait_for_previous_grid();  // mean and rstd are written
  const int64_t b = int64_t(gridDim.x) - 1 - blockIdx.x;
  const int64_t c = b % C, s = b / C;
  const int64_t k0 = s * chunk, k1 = min(Mp, k0 + chunk);
  const A m = mean[c], scale = rstd[c] * weight[c], sh = bias[c];
  const P* xp = reinterpret_cast<const P*>(x);
  P* yp = reinterpret_cast<P*>(y);
  int64_t k = k0 + threadIdx.x;
  ChannelWalk walk(k, kThreads, c, C, HWp);
  for (; k + (kUnroll - 1) * kThreads < k1; k += kUnroll * kThreads) {
    int64_t off[kUnroll];
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      off[u] = walk.off;
      v[u] = load_last_use(xp + off[u]);
      walk.next();
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const Values<T, V> a = values(v[u]);
      P out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = from_acc<T>(bn_forward(a.v[j], m, scale, sh));
      store_streaming(yp + off[u], out);
    }
  }
  for (; k < k1; k += kThreads) {
    const P v = load_last_use(xp + walk.off);
    const Values<T, V> a = values(v);
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_acc<T>(bn_forward(a.v[j], m, scale, sh));
    store_streaming(yp + walk.off, out);
    walk.next();
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    apply_cl_kernel(const T* __restrict__ x, const Acc<T>* __restrict__ mean, const Acc<T>* __restrict__ rstd,
                    const Acc<T>* __restrict__ weight, const Acc<T>* __restrict__ bias, T* __restrict__ y,
                    int64_t M, int64_t C, int64_t groups, int64_t chunk) {
  using A = Acc<T>;
  using P = Pack<T, V>;
  wait_for_previous_grid();
  const int64_t b = int64_t(gridDim.x) - 1 - blockIdx.x;
  const int64_t g = b % groups, s = b / groups;
  const int64_t Cp = C / V, cp = g * blockDim.x + threadIdx.x;
  if (cp >= Cp) return;
  const int64_t r0 = s * chunk, r1 = min(M, r0 + chunk);
  const int TY = blockDim.y;
  A m[V], scale[V], sh[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int64_t c = cp * V + j;
    m[j] = mean[c], scale[j] = rstd[c] * weight[c], sh[j] = bias[c];
  }
  const P* col = reinterpret_cast<const P*>(x) + cp;
  P* out_col = reinterpret_cast<P*>(y) + cp;
  int64_t r = r0 + threadIdx.y;
  for (; r + (kUnroll - 1) * TY < r1; r += kUnroll * TY) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_last_use(col + (r + u * TY) * Cp);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const Values<T, V> a = values(v[u]);
      P out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = from_acc<T>(bn_forward(a.v[j], m[j], scale[j], sh[j]));
      store_streaming(out_col + (r + u * TY) * Cp, out);
    }
  }
  for (; r < r1; r += TY) {
    const P v = load_last_use(col + r * Cp);
    const Values<T, V> a = values(v);
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_acc<T>(bn_forward(a.v[j], m[j], scale[j], sh[j]));
    store_streaming(out_col + r * Cp, out);
  }
}

// ------------------------------------------------------------------------------------------------
// Launcher
// ------------------------------------------------------------------------------------------------

template <typename T, int V>
void forward(const T* x, const Acc<T>* weight, const Acc<T>* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
             Acc<T>* running_mean, Acc<T>* running_var, Acc<T>* part, const BnPlan& p, int64_t N, int64_t C,
             int64_t HW, Acc<T> momentum, Acc<T> eps, cudaStream_t stream) {
  const LaunchOptions pdl{false, kPdl, 1};
  const dim3 grid(unsigned(p.groups * p.splits)), block(p.tx, p.ty);
  const int64_t M = N * HW;
  if (p.channels_last)
    launch(stats_cl_kernel<T, V>, grid, block, 0, stream, pdl, x, part, M, C, p.groups, p.chunk, p.partials);
  else
    launch(stats_nchw_kernel<T, V>, grid, block, 0, stream, pdl, x, part, C, HW / V, M / V, p.chunk,
           p.partials);
  COURSE_LAUNCH_CHECK();
  launch(finalize_kernel<Acc<T>>, dim3(unsigned(ceil_div<int64_t>(C, kFinCols))), dim3(kFinCols, kFinLanes),
         0, stream, pdl, part, p.splits, C, p.partials, momentum, eps, mean, rstd, running_mean, running_var);
  COURSE_LAUNCH_CHECK();
  if (p.channels_last)
    launch(apply_cl_kernel<T, V>, grid, block, 0, stream, pdl, x, mean, rstd, weight, bias, y, M, C, p.groups,
           p.chunk);
  else
    launch(apply_nchw_kernel<T, V>, grid, block, 0, stream, pdl, x, mean, rstd, weight, bias, y, C, HW / V,
           M / V, p.chunk);
  COURSE_LAUNCH_CHECK();
}

template <typename T, int V>
int stats_blocks_per_sm(bool channels_last) {
  const void* kernel = channels_last ? reinterpret_cast<const void*>(&stats_cl_kernel<T, V>)
                                     : reinterpret_cast<const void*>(&stats_nchw_kernel<T, V>);
  return norm_engine::blocks_per_sm(kernel, kThreads, 0);
}

}  // namespace

template <typename T>
BnPlan batchnorm_relu_forward_plan_cuda(int64_t N, int64_t C, int64_t HW, bool channels_last,
                                        bool vectorized) {
  constexpr int kVec = kPack16<T>;
  const int per_sm =
      vectorized ? stats_blocks_per_sm<T, kVec>(channels_last) : stats_blocks_per_sm<T, 1>(channels_last);
  return plan(N, C, HW, channels_last, vectorized ? kVec : 1, per_sm);
}

template <typename T>
void batchnorm_relu_forward_cuda(const T* x, const Acc<T>* weight, const Acc<T>* bias, T* y, Acc<T>* mean,
                                 Acc<T>* rstd, Acc<T>* running_mean, Acc<T>* running_var, Acc<T>* workspace,
                                 const BnPlan& plan, int64_t N, int64_t C, int64_t HW, Acc<T> momentum,
                                 Acc<T> eps, cudaStream_t stream) {
  if (plan.vec > 1)
    forward<T, kPack16<T>>(x, weight, bias, y, mean, rstd, running_mean, running_var, workspace, plan, N, C,
                           HW, momentum, eps, stream);
  else
    forward<T, 1>(x, weight, bias, y, mean, rstd, running_mean, running_var, workspace, plan, N, C, HW,
                  momentum, eps, stream);
}

#define INSTANTIATE(T)                                                                                       \
  template BnPlan batchnorm_relu_forward_plan_cuda<T>(int64_t, int64_t, int64_t, bool, bool);                \
  template void batchnorm_relu_forward_cuda<T>(const T*, const Acc<T>*, const Acc<T>*, T*, Acc<T>*, Acc<T>*, \
                                               Acc<T>*, Acc<T>*, Acc<T>*, const BnPlan&, int64_t, int64_t,   \
                                               int64_t, Acc<T>, Acc<T>, cudaStream_t);
COURSE_FOR_EACH_DTYPE(INSTANTIATE)
