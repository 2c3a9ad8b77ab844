// kernels/common/common.h: what every kernel file shares. No torch headers on purpose: a .cu file that
// includes only this compiles in about a second, so editing a kernel and re-running a cell is quick.
//
//   ceil_div(a, b)            blocks needed to cover a elements with b threads
//   COURSE_CUDA_CHECK(call)   throws std::runtime_error with file:line if a CUDA call fails
//   COURSE_LAUNCH_CHECK()     the same for the kernel launch just made (bad grid, no kernel image, ...)
//   Acc<T>                    the type to compute in: float for float/half/bfloat16, double for double
//   to_acc(v), from_acc<T>(v) explicit conversions (torch's JIT flags forbid the implicit half ones)
//   Pack<T, N>                N values of T loaded or stored as one aligned (up to 16-byte) access
//   block_sum(v)              sum K values over a thread block (result in thread 0)
//   num_sms()                 streaming multiprocessors of the current device (cached)
//   device_attribute(a)       any cudaDeviceAttr of the current device (cached)
//   launch(kernel, grid, block, smem, stream, {cooperative, pdl, cluster}, args...)
//                             a kernel launch with launch attributes: cooperative (every block resident
//                             at once, so grid.sync() is allowed), programmatic dependent launch, and/or
//                             thread block clusters
//   wait_for_previous_grid()  (device) PDL: wait until the kernel before this one in the stream is done
//   allow_next_grid()         (device) PDL: the next kernel in the stream may start launching now
//   add_columns_in_order(...) (device) after grid.sync: the blocks add columns of partial sums, fixed order
//   COURSE_FOR_EACH_DTYPE(X), COURSE_FOR_EACH_PARAM_PAIR(X)   instantiate a file's templates: X(T) per
//   element
//                             type; X(T, P) per (x, parameters) pair a norm takes (float32 parameters beside
//                             a float16/bfloat16 x, as native's norms allow)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#ifdef __CUDACC__
#define COURSE_HD __host__ __device__ __forceinline__
#else
#define COURSE_HD inline
#endif

template <typename I>
COURSE_HD constexpr I ceil_div(I a, I b) {
  return (a + b - 1) / b;
}

#define COURSE_CUDA_CHECK(call)                                                                            \
  do {                                                                                                     \
    cudaError_t err_ = (call);                                                                             \
    if (err_ != cudaSuccess)                                                                               \
      throw std::runtime_error(std::string("CUDA error at ") + __FILE__ + ":" + std::to_string(__LINE__) + \
                               ": " + cudaGetErrorString(err_) + " (" #call ")");                          \
  } while (0)

#define COURSE_LAUNCH_CHECK() COURSE_CUDA_CHECK(cudaGetLastError())

#define COURSE_FOR_EACH_DTYPE(X) X(float) X(double) X(__half) X(__nv_bfloat16)
// clang-format off
#define COURSE_FOR_EACH_PARAM_PAIR(X) \
  X(float, float) X(double, double) \
  X(__half, __half) X(__half, float) \
  X(__nv_bfloat16, __nv_bfloat16) X(__nv_bfloat16, float)
// clang-format on

template <typename T>
struct AccType {
  using type = float;
};
template <>
struct AccType<double> {
  using type = double;
};
template <typename T>
using Acc = typename AccType<T>::type;

COURSE_HD float to_acc(float v) { return v; }
COURSE_HD double to_acc(double v) { return v; }
#ifdef __CUDACC__
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
#endif

template <typename T>
COURSE_HD T from_acc(Acc<T> v) {
  return static_cast<T>(v);
}
#ifdef __CUDACC__
template <>
__device__ __forceinline__ __half from_acc<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
#endif

// N values moved as one memory instruction. With N * sizeof(T) == 16 that is the widest load a
// thread can issue (LDG.128): a quarter of the instructions of 4-byte loads for the same bytes.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
template <typename T>
constexpr int kPack16 = 16 / sizeof(T);

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// An attribute of the current device, cached per device and attribute (attributes never change).
template <cudaDeviceAttr kAttr>
int device_attribute() {
  static int cache[64] = {0};
  static bool known[64] = {false};
  int dev = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && known[dev]) return cache[dev];
  int value = 0;
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&value, kAttr, dev));
  if (dev < 64) cache[dev] = value, known[dev] = true;
  return value;
}

inline int num_sms() { return device_attribute<cudaDevAttrMultiProcessorCount>(); }

// Programmatic dependent launch (PDL, Hopper sm_90 and newer): a kernel launched with `pdl` may be
// scheduled while the kernel before it in the stream is still finishing, which hides the microsecond or
// two between two dependent kernels. Such a kernel must call wait_for_previous_grid() before it reads
// anything the previous kernel wrote; a kernel may call allow_next_grid() once the next one may start
// launching. On older GPUs (and with COURSE_NO_PDL=1 in the environment, to measure what it gains)
// the attribute is left out and both calls do nothing.
inline bool pdl_enabled() {
  static const bool allowed = std::getenv("COURSE_NO_PDL") == nullptr;  // read once: launches are hot
  return allowed && device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9;
}

struct LaunchOptions {
  bool cooperative = false;  // every block resident at once (cudaLaunchCooperativeKernel): grid.sync()
  bool pdl = false;          // programmatic dependent launch, where the GPU supports it
  int cluster = 1;           // thread block clusters of this many blocks along x (sm_90 and newer)
};

#ifdef __CUDACC__
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// The end of a deterministic column reduction, run by every block after grid.sync(): Q columns, column q
// being the P partial sums start(q)[0], start(q)[stride], start(q)[2 * stride], ... written by the grid.
// The columns are split evenly over the `blocks` blocks (this is block `block`) in groups of kCols
// adjacent columns; within a block, S segments of threads take partial rows seg, seg + S, ... of each of
// its groups (eight loads in flight, added in row order), then the S segment sums are added in order. The
// split depends only on Q, P, the grid and the block size, never on timing: the same bits on every run.
// store(q, sum) writes a result; `scratch` (shared) holds at least kCols values per thread. Loads use
// __ldcg (L2): other SMs wrote the partials.
// kCols = 4 (float sums only): Q a multiple of 4, start(q) 16-byte aligned where q % 4 == 0 and the four
// columns from there contiguous. One 16-byte load brings four columns of a partial row, and S is capped so
// that a thread has at most eight rows: one trip to L2 per thread, where one column per thread took two
// (bf16 2048 x 8192 LayerNorm: 16 partial rows per thread).
template <int kCols = 1, typename acc_t, typename Start, typename Store>
__device__ void add_columns_in_order(int64_t Q, int64_t block, int64_t blocks, int P, int64_t stride,
                                     Start start, Store store, acc_t* scratch) {
  static_assert(kCols == 1 || (kCols == 4 && sizeof(acc_t) == 4), "kCols: 1, or 4 float columns");
  using V = Pack<acc_t, kCols>;
  const int threads = blockDim.x * blockDim.y, t = threadIdx.y * blockDim.x + threadIdx.x;
  const int64_t groups = Q / kCols, g0 = block * groups / blocks;
  const int gn = int((block + 1) * groups / blocks - g0);  // this block's groups of kCols columns
  if (gn == 0) return;                                     // the same for the whole block
  int S = max(1, min(P, threads / gn));
  if (kCols > 1) S = max(1, min(S, (P + 7) / 8));  // at most eight rows a thread: one batch of loads
  const auto load = [&](const acc_t* p) {
    if constexpr (kCols == 1) {
      return V{{__ldcg(p)}};
    } else {
      const float4 f = __ldcg(reinterpret_cast<const float4*>(p));
      return V{{f.x, f.y, f.z, f.w}};
    }
  };
  for (int i = t; i < S * gn; i += threads) {
    const int seg = i / gn;
    const int64_t q = (g0 + i % gn) * kCols;
    const acc_t* src = start(q);
    acc_t sum[kCols] = {};
    int p = seg;
    for (; p + 7 * S < P; p += 8 * S) {
      V v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = load(src + int64_t(p + k * S) * stride);
#pragma unroll
      for (int k = 0; k < 8; ++k)
#pragma unroll
        for (int c = 0; c < kCols; ++c) sum[c] += v[k].v[c];
    }
    if constexpr (kCols == 1) {
      for (; p < P; p += S) sum[0] += __ldcg(src + int64_t(p) * stride);
    } else if (p < P) {  // the last rows (fewer than eight), all in flight at once
      V v[7];
#pragma unroll
      for (int k = 0; k < 7; ++k) v[k] = p + k * S < P ? load(src + int64_t(p + k * S) * stride) : V{};
#pragma unroll
      for (int k = 0; k < 7; ++k)
        if (p + k * S < P)
#pragma unroll
          for (int c = 0; c < kCols; ++c) sum[c] += v[k].v[c];
    }
    if (S == 1) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) store(q + c, sum[c]);
    } else {
      V out;  // S * gn <= threads: one pass of the loop
#pragma unroll
      for (int c = 0; c < kCols; ++c) out.v[c] = sum[c];
      reinterpret_cast<V*>(scratch)[i] = out;
    }
  }
  if (S == 1) return;
  __syncthreads();
  const int cols = gn * kCols;  // segment seg's sums are scratch[seg * cols, (seg + 1) * cols)
  for (int i = t; i < cols; i += threads) {
    acc_t sum = 0;
    for (int seg = 0; seg < S; ++seg) sum += scratch[seg * cols + i];
    store(g0 * kCols + i, sum);
  }
}

// kernel<<<grid, block, smem, stream>>>(args...) with the launch attributes of `options`.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            LaunchOptions options, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[3];
  unsigned n = 0;
  if (options.cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n++].val.clusterDim = {unsigned(options.cluster), 1, 1};
  }
  if (options.cooperative) {
    attrs[n].id = cudaLaunchAttributeCooperative;
    attrs[n++].val.cooperative = 1;
  }
  if (options.pdl && pdl_enabled()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attrs;
  config.numAttrs = n;
  COURSE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}
#endif

#ifdef __CUDACC__
// Sums v[0..K) over the block: warp shuffles, then one value per warp through shared memory.
// blockDim.x must be a multiple of 32. The result is in thread 0; the order of additions is fixed,
// so the result is the same on every run.
template <typename T, int K>
__device__ void block_sum(T (&v)[K]) {
  __shared__ T warp_sums[32][K];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int k = 0; k < K; ++k)
    for (int off = 16; off > 0; off /= 2) v[k] += __shfl_down_sync(0xffffffffu, v[k], off);
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) warp_sums[warp][k] = v[k];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = lane < blockDim.x / 32 ? warp_sums[lane][k] : T(0);
      for (int off = 16; off > 0; off /= 2) v[k] += __shfl_down_sync(0xffffffffu, v[k], off);
    }
  }
  __syncthreads();  // warp_sums may be reused by a second call
}
#endif
