// kernels/layernorm/layernorm.cu: LayerNorm over the last dimension, forward and backward (lesson 03).
//
//   y = (x - mean) * rstd * weight + bias,   rstd = 1 / sqrt(mean((x - mean)^2) + eps),  per row of N.
//
// A norm reads x and writes y once (2*M*N elements forward), and reads x and grad_y and writes grad_x
// once (3*M*N backward); anything more is wasted bandwidth, so the speed limit is a copy of the same
// bytes. The versions, in the order lesson 03 builds them (numbers never change; launchers in layernorm.h):
//
//   forward v1   forward_v1_kernel, layernorm_forward_v1: one thread per row, three passes over the row.
//                The simplest correct kernel; slow: an [M, N] input gives only M threads, and
//                neighbouring threads read addresses N elements apart (no load is coalesced).
//   forward v2   forward_v2_kernel, layernorm_forward_v2 (in layernorm.exercises.cu: it runs your
//                warp_sum): one warp per row. 32 neighbouring lanes read 32 neighbouring elements (one
//                coalesced transaction) and their partial sums meet through warp shuffles.
//   forward v3   forward_v3_kernel, layernorm_forward_v3 with ForwardKernel::kRegisters: 16-byte loads
//                (Pack: 4 floats, 8 bf16) and the row held in registers (load_row, normalize_row in
//                layernorm_common.cuh), so x is read from memory once and the two-pass statistics come
//                from registers; a row group of 1 to 32 warps owns a row. Rows too long for registers:
//                forward_v3_long_kernel (one block per row, Welford's one pass, a second read from L2).
//   backward v1  backward_v1_dx_kernel (layernorm.exercises.cu: your grad_x row) and
//                backward_v1_dwdb_kernel, layernorm_backward_v1: one warp per row for grad_x, one thread
//                per column for grad_weight and grad_bias. Simple, but x and grad_y are read twice.
//   backward v2  backward_v2_kernel and sum_partials_kernel, layernorm_backward_v2 with
//                BackwardKernel::kTwoKernels: one pass. A persistent grid strides over the rows
//                (backward_v2_rows in layernorm_common.cuh); each row group holds its row of x and grad_y
//                in registers with the next row already in flight, writes grad_x and adds to the block's
//                column sums in shared memory; each block writes one row of partial sums and the second
//                kernel adds those rows in a fixed order: no atomics, the same bits on every run. Rows too
//                long for registers: backward_v2_long_dx_kernel and column_partials_kernel.
//
// Unaligned pointers, or N not a multiple of the pack width, run the same kernels with one value per
// pack. Everything is computed in Acc<T> (float, double for double inputs) and stored as T.
// The tuning past v3 and v2 (rows pipelined by cp.async, one backward kernel ending in a grid barrier, TMA
// bulk copies) is in layernorm.hopper.cu, explained in notebooks/03b_layernorm_hopper.ipynb; the default
// choice, kAuto (layernorm_choices.h), runs it where it is faster. The op, course::layer_norm, runs this
// ladder's kAuto or lesson 05's norm engine: layernorm.route.cu's table says which, for which shapes.
#include "layernorm_common.cuh"

using namespace layernorm;

namespace {

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

// v2: one warp per row, in kernels/layernorm/layernorm.exercises.cu (it runs the exercise's warp_sum).

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

// v1 grad_x: one warp per row, in kernels/layernorm/layernorm.exercises.cu (it runs the exercise's
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

// v2: backward_v2_rows (layernorm_common.cuh) over the block's rows: grad_x, and the block's row of
// partial column sums, which sum_partials_kernel then adds.
template <typename T, int kVec, int kPacks>
__global__ __launch_bounds__(1024) void backward_v2_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                           const Acc<T>* __restrict__ mean,
                                                           const Acc<T>* __restrict__ rstd,
                                                           const T* __restrict__ w, T* __restrict__ dx,
                                                           Acc<T>* __restrict__ partials, int64_t M, int N) {
  backward_v2_rows<T, kVec, kPacks>(dy, x, mean, rstd, w, dx, partials, M, N);
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
// Planning: how many threads per row, how many rows per block and blocks in all.
// ------------------------------------------------------------------------------------------------

// forward_v3_kernel with kPacks packs of kVec values per thread: row groups of whole warps, at least 4
// warps per block; false (nothing launched) where a row needs more than 1024 threads.
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

// Backward v2's plan for `kernel`: the one-kernel backward of layernorm.hopper.cu where it applies (not
// asked for kTwoKernels; float, half, bf16), else backward_v2_kernel and sum_partials_kernel: 2-byte types
// at 16 bytes of x per thread for rows up to 4096 and 32 above (more threads per row is better until there
// are too many), float and double at 32, one value per pack where a row is not vectorizable; rows too long
// for registers take the long-row path (kLongRows: column sums over slices of rows, ~8 blocks of 256 per SM).
template <typename T>
BackwardPlan plan_backward_v2(const T* dy, const T* x, const T* w, const T* dx, int64_t M, int N,
                              BackwardKernel kernel) {
  constexpr int V = kPack16<T>;
  constexpr int kScalarPacks = kBwdBytes / 8 / (sizeof(T) > 4 ? 2 : 1);  // 4 floats, 2 doubles
  BackwardPlan plan;
  if constexpr (sizeof(T) <= 4)
    if (kernel != BackwardKernel::kTwoKernels) plan = plan_backward_tuned<T>(dy, x, w, dx, M, N, kernel);
  if (plan.run != BackwardRun::kNone) return plan;
  if (vectorizable<T>(N, {dy, x, w, dx})) {
    if constexpr (sizeof(T) == 2)
      if (N <= 4096)
        plan = plan_backward_rows<T, V, kBwdBytes / 32>(backward_v2_kernel<T, V, kBwdBytes / 32>,
                                                        BackwardRun::kRows, M, N, false);
    if (plan.run == BackwardRun::kNone)
      plan = plan_backward_rows<T, V, kBwdBytes / 16>(backward_v2_kernel<T, V, kBwdBytes / 16>,
                                                      BackwardRun::kRows, M, N, false);
  } else {
    plan = plan_backward_rows<T, 1, kScalarPacks>(backward_v2_kernel<T, 1, kScalarPacks>,
                                                  BackwardRun::kScalarRows, M, N, false);
  }
  if (plan.run == BackwardRun::kNone) {
    plan.run = BackwardRun::kLongRows;
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

// layernorm_forward_v2 is in kernels/layernorm/layernorm.exercises.cu (with the kernel that runs the
// exercise).

// forward v3 with `kernel` (layernorm_choices.h). Row widths: 2-byte types 32 bytes per thread if the row
// fits, else 64; float and double 64; one value per pack where the row is not vectorizable; longer rows
// forward_v3_long_kernel. kAuto and kPipelined first try the pipelined kernel of layernorm.hopper.cu
// (half and bf16; kAuto only on sm_90+ and where it does at most 4 rounds). Only the ladder's kernels: the
// op's choice between them and the norm engine is layernorm.route.cu's.
template <typename T>
void layernorm_forward_v3(const T* x, const T* weight, const T* bias, T* y, Acc<T>* mean, Acc<T>* rstd,
                          int64_t M, int N, Acc<T> eps, cudaStream_t stream, ForwardKernel kernel) {
  constexpr int V = kPack16<T>;
  const bool vec = vectorizable<T>(N, {x, weight, bias, y});
  bool done = false;
  if constexpr (sizeof(T) == 2) {
    const bool hopper = device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9;
    const bool forced = kernel == ForwardKernel::kPipelined;
    if (vec && (forced || (kernel == ForwardKernel::kAuto && hopper)))
      done =
          forward_v3_pipelined<T>(x, weight, bias, y, mean, rstd, M, N, eps, stream, forced ? INT64_MAX : 4);
  }
  if (vec && !done) {
    if constexpr (sizeof(T) == 2)
      done = launch_forward_v3<T, V, kFwdBytes / 32>(x, weight, bias, y, mean, rstd, M, N, eps, stream);
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
                                        int64_t M, int N, BackwardKernel kernel) {
  return 2 * int64_t(plan_backward_v2<T>(grad_y, x, weight, grad_x, M, N, kernel).blocks) * N;
}

template <typename T>
void layernorm_backward_v2(const T* grad_y, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                           const T* weight, T* grad_x, T* grad_weight, T* grad_bias, Acc<T>* workspace,
                           int64_t M, int N, cudaStream_t stream, BackwardKernel kernel) {
  constexpr int V = kPack16<T>;
  constexpr int kScalarPacks = kBwdBytes / 8 / (sizeof(T) > 4 ? 2 : 1);  // 4 floats, 2 doubles
  const BackwardPlan plan = plan_backward_v2<T>(grad_y, x, weight, grad_x, M, N, kernel);
  if (plan.fuse) {  // one kernel (layernorm.hopper.cu), which also writes grad_weight and grad_bias
    if constexpr (sizeof(T) <= 4)
      launch_backward_tuned<T>(plan, grad_y, x, mean, rstd, weight, grad_x, workspace, grad_weight, grad_bias,
                               M, N, stream);
    return;
  }
  const auto run = [&](auto kernel) {
    launch(kernel, dim3(plan.blocks), plan.block, plan.smem, stream, {false, false}, grad_y, x, mean, rstd,
           weight, grad_x, workspace, M, N);
  };
  if (plan.run == BackwardRun::kRows && plan.packs == kBwdBytes / 16)
    run(backward_v2_kernel<T, V, kBwdBytes / 16>);
  if constexpr (sizeof(T) == 2)
    if (plan.run == BackwardRun::kRows && plan.packs == kBwdBytes / 32)
      run(backward_v2_kernel<T, V, kBwdBytes / 32>);
  if (plan.run == BackwardRun::kScalarRows) run(backward_v2_kernel<T, 1, kScalarPacks>);
  if (plan.run == BackwardRun::kLongRows) {
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
                                        Acc<T>, cudaStream_t, ForwardKernel);                                \
  template void layernorm_backward_v1<T>(const T*, const T*, const Acc<T>*, const Acc<T>*, const T*, T*, T*, \
                                         T*, int64_t, int, cudaStream_t);                                    \
  template int64_t layernorm_backward_v2_workspace<T>(const T*, const T*, const T*, const T*, int64_t, int,  \
                                                      BackwardKernel);                                       \
  template void layernorm_backward_v2<T>(const T*, const T*, const Acc<T>*, const Acc<T>*, const T*, T*, T*, \
                                         T*, Acc<T>*, int64_t, int, cudaStream_t, BackwardKernel);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
