// csr_matmul.cu: sparse (CSR) times dense on the GPU, Y = A @ B, and the dense operand's gradient
// grad_B = A^T @ grad_Y (lesson 09's practice set: the answer).
//
// Each nonzero A[i, j] gathers row j of B (n values) into row i of Y: crow, col and val are read once, a row
// of B once per nonzero in its column (from L2 where it hits), Y written once. The work is irregular: what
// limits a kernel is how evenly the nonzeros are spread over the warps. A power-law matrix (most rows a
// handful of nonzeros, a few rows 10^4..10^5) leaves the warps of the long rows working long after the others
// are done.
//
//   v1 warp per row  csr_spmv_warp_row_kernel (n = 1) and csr_spmm_warp_row_kernel<V> (n > 1), launched by
//                    forward_warp_row: warp i computes row i. For n = 1 the lanes split the row's nonzeros
//                    and add their sums with shuffles; for n > 1 the lanes split the columns (V each, one
//                    Pack load) and walk the row's nonzeros together, so that each row of B is one coalesced
//                    load.
//   v2 balanced      csr_partition_kernel, csr_spmv_balanced_kernel / csr_spmm_balanced_kernel<V>, then
//                    csr_carry_fixup_kernel, launched by forward_balanced: every warp gets the same number of
//                    merge items (rows' ends and nonzeros, merge-path style), where its share starts found by
//                    a binary search over crow. The rows that end in a warp's share are stored; the one it
//                    leaves unfinished goes to a carry that the fix-up adds, in warp order: the same bits on
//                    every run. A row of 10^5 nonzeros is then a few hundred warps' work instead of one's.
//   backward         csr_scatter_warp_row_kernel<V> and csr_scatter_balanced_kernel<V> (backward_warp_row,
//                    backward_balanced): the same two partitions, each nonzero A[i, j] adding val * grad_Y[i,
//                    :] into grad_B[j, :] with atomicAdd (float2/float4 atomics on sm_90). No transpose of A
//                    (a stable one needs a sort on the GPU); the price is that the order of the adds, and so
//                    the last bits of grad_B, changes from run to run.
//   checks           csr_check_kernel: crow starts at 0, never decreases, ends at nnz; the product kernels
//   check
//                    each column as they read it (CsrView::entry). The bits land in *bad, read back once by
//                    csr_read_flag_cuda.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "csr_matmul.h"

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;  // 8 warps (8 rows, or 8 shares) per block
constexpr unsigned kAllLanes = 0xffffffffu;

// The balanced kernels' share per warp: enough warps for four rounds of 64 per SM (warps whose B rows come
// from memory finish later than those whose rows are in L2, and a later round fills the gaps), at least 32
// items (one per lane), at most 4096 (a carry and a search per share stay small next to the share's own
// work).
constexpr int64_t kWarpsPerSm = 64, kRounds = 4, kMinItems = 32, kMaxItems = 4096;

template <typename I>
__device__ __forceinline__ I clamp_to(I v, I lo, I hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// A's arrays and sizes, and reads that bad indices cannot take outside the arrays.
template <typename T>
struct CsrView {
  const int64_t* crow;
  const int64_t* col;
  const T* val;
  int64_t m, k, nnz;
  int* bad;

  // Nonzero i: its column c and value v. A column outside [0, K) reads as column 0 with value 0 (nothing is
  // read outside B) and sets kBadCol in `seen`, a register that the kernel adds to *bad once, at its end
  // (report): an atomic in the loop would keep the compiler from issuing the next nonzeros' loads before it,
  // and the gathers would go one at a time.
  __device__ __forceinline__ void entry(int64_t i, int64_t& c, T& v, int& seen) const {
    const int64_t j = __ldg(col + i);
    const T x = __ldg(val + i);
    const bool ok = j >= 0 && j < k;
    c = ok ? j : 0;
    v = ok ? x : T(0);
    seen |= ok ? 0 : kBadCol;
  }
  __device__ __forceinline__ void report(int seen) const {
    if (seen) atomicOr(bad, seen);
  }
  // Row r's nonzeros [k0, k1), clamped into [0, nnz] (csr_check_kernel reports a crow that needs it).
  __device__ __forceinline__ void row(int64_t r, int64_t& k0, int64_t& k1) const {
    k0 = clamp_to<int64_t>(crow[r], 0, nnz);
    k1 = clamp_to<int64_t>(crow[r + 1], k0, nnz);
  }
  // Where row r ends, crow[r + 1], clamped into [lo, hi].
  __device__ __forceinline__ int64_t row_end(int64_t r, int64_t lo, int64_t hi) const {
    return clamp_to<int64_t>(crow[r + 1], lo, hi);
  }
};

// The sum over the warp, in every lane.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kAllLanes, v, offset);
  return v;
}

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}

template <typename T, int V>
__device__ __forceinline__ void store_pack(T* p, const T (&v)[V]) {
  Pack<T, V> out;
#pragma unroll
  for (int j = 0; j < V; ++j) out.v[j] = v[j];
  *reinterpret_cast<Pack<T, V>*>(p) = out;
}

// p[0 .. V) += v, atomically per element: one float2/float4 atomic on sm_90 (a quarter of the instructions
// for four floats), else one atomicAdd per value.
template <typename T, int V>
__device__ __forceinline__ void atomic_add_pack(T* p, const T (&v)[V]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (std::is_same_v<T, float> && V == 4) {
    atomicAdd(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  } else if constexpr (std::is_same_v<T, float> && V == 2) {
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(v[0], v[1]));
  } else
#endif
  {
#pragma unroll
    for (int j = 0; j < V; ++j) atomicAdd(p + j, v[j]);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The work on one row's nonzeros [k0, k1), shared by v1 and v2
// ---------------------------------------------------------------------------------------------------------------

// n = 1: the dot product of those nonzeros with the vector b. The lanes take every 32nd nonzero, then add
// their sums with shuffles. The whole warp calls it, and every lane gets the sum.
template <typename T>
__device__ T dot_segment(const CsrView<T>& a, const T* __restrict__ b, int64_t k0, int64_t k1, int lane,
                         int& seen) {
  T sum = 0;
  // TODO(exercise): your code here (the solution is 7 lines).
  return sum;
}

// n > 1: acc += the nonzeros times their rows of B ([K, n]), at this lane's V columns c0 .. c0 + V - 1. The
// lanes walk the same nonzeros, each at its own columns: a row of B is one coalesced load for the warp.
template <typename T, int V>
__device__ void axpy_segment(const CsrView<T>& a, const T* __restrict__ b, int64_t n, int64_t c0, int64_t k0,
                             int64_t k1, T (&acc)[V], int& seen) {
  // TODO(exercise): your code here (the solution is 9 lines).
}

// ---------------------------------------------------------------------------------------------------------------
// v1: one warp per row
// ---------------------------------------------------------------------------------------------------------------

// n = 1: warp r computes y[r].
template <typename T>
__global__ void csr_spmv_warp_row_kernel(CsrView<T> a, const T* __restrict__ b, T* __restrict__ y) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= a.m) return;  // the warp's lanes leave together: they share the row
  int seen = 0;            // bad columns met (CsrView::entry)
  // TODO(exercise): your code here (the solution is 4 lines).
  a.report(seen);
}

// n > 1: warp r computes row r of y; lane l its columns l * V .. l * V + V - 1, then 32 * V further on, and
// so on.
template <typename T, int V>
__global__ void csr_spmm_warp_row_kernel(CsrView<T> a, const T* __restrict__ b, T* __restrict__ y,
                                         int64_t n) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= a.m) return;
  int seen = 0;
  // TODO(exercise): your code here (the solution is 7 lines).
  a.report(seen);
}

// ---------------------------------------------------------------------------------------------------------------
// v2: every warp the same share of the merge of rows' ends and nonzeros
// ---------------------------------------------------------------------------------------------------------------

// The merge list of A: row r's nonzeros, then row r's end, then row r + 1's nonzeros, ... (M + nnz items). Of
// its first d items, x are rows' ends and d - x nonzeros; x is the first row whose end is not among them,
// that is whose end comes after nonzero d - x - 1: crow[x + 1] > d - x - 1. That test is false, then true, as
// x grows from max(0, d - nnz) to min(d, M): a binary search finds x. Every result is in [0, M], and d - x in
// [0, nnz], even for a crow that breaks the rules.
__device__ int64_t merge_path_rows(const int64_t* __restrict__ crow, int64_t m, int64_t nnz, int64_t d) {
  int64_t lo = d > nnz ? d - nnz : 0, hi = d < m ? d : m;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (crow[mid + 1] <= d - mid - 1)
      lo = mid + 1;  // row mid's end is among the first d items
    else
      hi = mid;
  }
  return lo;
}

// part[w] = the rows' ends before warp w's share, which starts at item w * items (part[warps]: all M of
// them).
__global__ void csr_partition_kernel(const int64_t* __restrict__ crow, int64_t m, int64_t nnz, int64_t items,
                                     int64_t warps, int64_t* __restrict__ part) {
  const int64_t w = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (w > warps) return;
  part[w] = merge_path_rows(crow, m, nnz, min(w * items, m + nnz));
}

// Warp w's share, items [w * items, (w + 1) * items) of the merge list: the rows part[w] .. part[w + 1] - 1
// end in it and are stored (the first may have begun in an earlier share: that part of it is in carries), and
// row part[w + 1] (when it is < M) has its nonzeros from here to the share's end summed into carry[w], which
// csr_carry_fixup_kernel adds. n = 1.
template <typename T>
__global__ void csr_spmv_balanced_kernel(CsrView<T> a, const T* __restrict__ b, T* __restrict__ y,
                                         const int64_t* __restrict__ part, int64_t items, int64_t warps,
                                         T* __restrict__ carry) {
  const int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (w >= warps) return;
  int seen = 0;
  // TODO(exercise): your code here (the solution is 11 lines).
  a.report(seen);
}

// The same for n > 1: carry[w * n .. (w + 1) * n) is the unfinished row's part, columns as in y.
template <typename T, int V>
__global__ void csr_spmm_balanced_kernel(CsrView<T> a, const T* __restrict__ b, T* __restrict__ y, int64_t n,
                                         const int64_t* __restrict__ part, int64_t items, int64_t warps,
                                         T* __restrict__ carry) {
  const int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (w >= warps) return;
  int seen = 0;
  // TODO(exercise): your code here (the solution is 16 lines).
  a.report(seen);
}

// After the balanced kernel: each row's carries added to it, in warp order (the same bits on every run). A
// row's carries are consecutive (shares follow one another along the merge list); the warp of its first one
// adds them all, the others leave.
template <typename T>
__global__ void csr_carry_fixup_kernel(const int64_t* __restrict__ part, const T* __restrict__ carry,
                                       T* __restrict__ y, int64_t m, int64_t n, int64_t warps) {
  const int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (w >= warps) return;
  const int64_t row = part[w + 1];
  if (row < 0 || row >= m || (w > 0 && part[w] == row)) return;  // no row, or not its first carry
  int64_t end = w + 1;
  while (end < warps && part[end + 1] == row) ++end;
  for (int64_t c = lane; c < n; c += kWarp) {
    T sum = 0;
    for (int64_t u = w; u < end; ++u) sum += carry[u * n + c];
    y[row * n + c] += sum;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Backward: grad_b += A^T @ grad_y, a scatter with atomicAdd
// ---------------------------------------------------------------------------------------------------------------

// Row r's nonzeros [k0, k1) add val * grad_y[r, :] into the rows of grad_b their columns name, 32 nonzeros at
// a time: each lane reads one (its column and value), then come the adds, so that no read waits behind an
// atomic. n = 1: each lane adds its own nonzero's term. n > 1: the warp takes the 32 one by one (column and
// value passed around by shuffles), each lane adding at its V columns.
template <typename T, int V>
__device__ void scatter_segment(const CsrView<T>& a, const T* __restrict__ grad_y_row, T* __restrict__ grad_b,
                                int64_t n, int64_t k0, int64_t k1, int lane, int& seen) {
  for (int64_t base = k0; base < k1; base += kWarp) {
    int64_t c = 0;
    T v = 0;
    if (base + lane < k1) a.entry(base + lane, c, v, seen);
    if (n == 1) {
      if (base + lane < k1) atomicAdd(grad_b + c, v * grad_y_row[0]);
      continue;
    }
    const int count = k1 - base < kWarp ? int(k1 - base) : kWarp;
    for (int j = 0; j < count; ++j) {
      const int64_t cj = __shfl_sync(kAllLanes, c, j);
      const T vj = __shfl_sync(kAllLanes, v, j);
      for (int64_t c0 = int64_t(lane) * V; c0 < n; c0 += kWarp * V) {
        const Pack<T, V> g = load_pack<T, V>(grad_y_row + c0);
        T add[V];
#pragma unroll
        for (int u = 0; u < V; ++u) add[u] = vj * g.v[u];
        atomic_add_pack<T, V>(grad_b + cj * n + c0, add);
      }
    }
  }
}

template <typename T, int V>
__global__ void csr_scatter_warp_row_kernel(CsrView<T> a, const T* __restrict__ grad_y,
                                            T* __restrict__ grad_b, int64_t n) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= a.m) return;
  int64_t k0, k1;
  a.row(row, k0, k1);
  int seen = 0;
  scatter_segment<T, V>(a, grad_y + row * n, grad_b, n, k0, k1, lane, seen);
  a.report(seen);
}

// Warp w's share as in the balanced forward, the unfinished row part[w + 1] included: atomics need no carry.
template <typename T, int V>
__global__ void csr_scatter_balanced_kernel(CsrView<T> a, const T* __restrict__ grad_y,
                                            T* __restrict__ grad_b, int64_t n,
                                            const int64_t* __restrict__ part, int64_t items, int64_t warps) {
  const int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (w >= warps) return;
  const int64_t first = part[w], last = part[w + 1];
  int64_t k = w * items - first;
  const int64_t k_end = max(k, min((w + 1) * items, a.m + a.nnz) - last);
  int seen = 0;
  for (int64_t r = first; r <= last && r < a.m; ++r) {
    const int64_t next = r < last ? a.row_end(r, k, k_end) : k_end;
    if (next > k) scatter_segment<T, V>(a, grad_y + r * n, grad_b, n, k, next, lane, seen);
    k = next;
  }
  a.report(seen);
}

// ---------------------------------------------------------------------------------------------------------------
// The index check
// ---------------------------------------------------------------------------------------------------------------

__global__ void csr_check_kernel(const int64_t* __restrict__ crow, const int64_t* __restrict__ col, int64_t m,
                                 int64_t k, int64_t nnz, bool check_col, int* bad) {
  const int64_t count = check_col && nnz > m ? nnz : m;
  int found = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < m && crow[i + 1] < crow[i]) found |= kBadCrowOrder;
    if (check_col && i < nnz && (col[i] < 0 || col[i] >= k)) found |= kBadCol;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (crow[0] != 0) found |= kBadCrowStart;
    if (crow[m] != nnz) found |= kBadCrowEnd;
  }
  if (found) atomicOr(bad, found);
}

// ---------------------------------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------------------------------

// Columns per lane for n > 1: the widest Pack (16 bytes at most) that divides n, suits both pointers'
// alignment and still gives every lane a column (n >= 32 * V: n = 64 floats is 2 per lane, not 4 per lane on
// half the lanes).
template <typename T>
int pack_width(int64_t n, const void* p, const void* q) {
  const auto fits = [&](int v) {
    const std::uintptr_t bytes = v * sizeof(T);
    return n % v == 0 && n >= int64_t(kWarp) * v && reinterpret_cast<std::uintptr_t>(p) % bytes == 0 &&
           reinterpret_cast<std::uintptr_t>(q) % bytes == 0;
  };
  if (sizeof(T) <= 4 && fits(4)) return 4;
  return fits(2) ? 2 : 1;
}

// f(std::integral_constant<int, V>{}) for the V that pack_width chose.
template <typename T, typename F>
void with_pack_width(int v, F f) {
  if constexpr (sizeof(T) <= 4) {
    if (v == 4) return f(std::integral_constant<int, 4>{});
  }
  if (v == 2) return f(std::integral_constant<int, 2>{});
  f(std::integral_constant<int, 1>{});
}

int64_t blocks_for_warps(int64_t warps) { return ceil_div<int64_t>(warps * kWarp, kThreads); }

void partition(const int64_t* crow, int64_t m, int64_t nnz, const CsrPlan& plan, int64_t* part,
               cudaStream_t stream) {
  csr_partition_kernel<<<ceil_div<int64_t>(plan.warps + 1, kThreads), kThreads, 0, stream>>>(
      crow, m, nnz, plan.items, plan.warps, part);
  COURSE_LAUNCH_CHECK();
}

template <typename T, int V>
void forward_warp_row(const CsrView<T>& a, const T* b, T* y, int64_t n, cudaStream_t stream) {
  const int64_t blocks = blocks_for_warps(a.m);
  if (n == 1)
    csr_spmv_warp_row_kernel<T><<<blocks, kThreads, 0, stream>>>(a, b, y);
  else
    csr_spmm_warp_row_kernel<T, V><<<blocks, kThreads, 0, stream>>>(a, b, y, n);
  COURSE_LAUNCH_CHECK();
}

template <typename T, int V>
void forward_balanced(const CsrView<T>& a, const T* b, T* y, int64_t n, const CsrPlan& plan, int64_t* part,
                      T* carry, cudaStream_t stream) {
  partition(a.crow, a.m, a.nnz, plan, part, stream);
  const int64_t blocks = blocks_for_warps(plan.warps);
  if (n == 1)
    csr_spmv_balanced_kernel<T>
        <<<blocks, kThreads, 0, stream>>>(a, b, y, part, plan.items, plan.warps, carry);
  else
    csr_spmm_balanced_kernel<T, V>
        <<<blocks, kThreads, 0, stream>>>(a, b, y, n, part, plan.items, plan.warps, carry);
  COURSE_LAUNCH_CHECK();
  csr_carry_fixup_kernel<T><<<blocks, kThreads, 0, stream>>>(part, carry, y, a.m, n, plan.warps);
  COURSE_LAUNCH_CHECK();
}

template <typename T, int V>
void backward_warp_row(const CsrView<T>& a, const T* grad_y, T* grad_b, int64_t n, cudaStream_t stream) {
  csr_scatter_warp_row_kernel<T, V><<<blocks_for_warps(a.m), kThreads, 0, stream>>>(a, grad_y, grad_b, n);
  COURSE_LAUNCH_CHECK();
}

template <typename T, int V>
void backward_balanced(const CsrView<T>& a, const T* grad_y, T* grad_b, int64_t n, const CsrPlan& plan,
                       int64_t* part, cudaStream_t stream) {
  partition(a.crow, a.m, a.nnz, plan, part, stream);
  csr_scatter_balanced_kernel<T, V><<<blocks_for_warps(plan.warps), kThreads, 0, stream>>>(
      a, grad_y, grad_b, n, part, plan.items, plan.warps);
  COURSE_LAUNCH_CHECK();
}

}  // namespace

CsrPlan csr_plan(int64_t m, int64_t nnz, CsrKernel kernel) {
  if (kernel == CsrKernel::kWarpPerRow) return {CsrKernel::kWarpPerRow, 0, 0};
  const int64_t total = std::max<int64_t>(1, m + nnz);
  const int64_t target = int64_t(num_sms()) * kWarpsPerSm * kRounds;
  const int64_t items = std::clamp(ceil_div(total, target), kMinItems, kMaxItems);
  return {CsrKernel::kBalanced, items, ceil_div(total, items)};
}

void csr_check_cuda(const int64_t* crow, const int64_t* col, int64_t m, int64_t k, int64_t nnz,
                    bool check_col, int* bad, cudaStream_t stream) {
  const int64_t count = std::max<int64_t>(1, check_col ? std::max(m, nnz) : m);
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(count, kThreads), int64_t(num_sms()) * 8);
  csr_check_kernel<<<blocks, kThreads, 0, stream>>>(crow, col, m, k, nnz, check_col, bad);
  COURSE_LAUNCH_CHECK();
}

int csr_read_flag_cuda(const int* bad, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  COURSE_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return -1;
  int flags = 0;
  COURSE_CUDA_CHECK(cudaMemcpyAsync(&flags, bad, sizeof(int), cudaMemcpyDeviceToHost, stream));
  COURSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return flags;
}

template <typename T>
void csr_matmul_cuda(const int64_t* crow, const int64_t* col, const T* val, const T* b, T* y, int64_t m,
                     int64_t k, int64_t nnz, int64_t n, const CsrPlan& plan, int64_t* part, T* carry,
                     int* bad, cudaStream_t stream) {
  const CsrView<T> a{crow, col, val, m, k, nnz, bad};
  with_pack_width<T>(n == 1 ? 1 : pack_width<T>(n, b, y), [&](auto width) {
    constexpr int V = decltype(width)::value;
    if (plan.kernel == CsrKernel::kWarpPerRow)
      forward_warp_row<T, V>(a, b, y, n, stream);
    else
      forward_balanced<T, V>(a, b, y, n, plan, part, carry, stream);
  });
}

template <typename T>
void csr_matmul_backward_cuda(const int64_t* crow, const int64_t* col, const T* val, const T* grad_y,
                              T* grad_b, int64_t m, int64_t k, int64_t nnz, int64_t n, const CsrPlan& plan,
                              int64_t* part, int* bad, cudaStream_t stream) {
  const CsrView<T> a{crow, col, val, m, k, nnz, bad};
  with_pack_width<T>(n == 1 ? 1 : pack_width<T>(n, grad_y, grad_b), [&](auto width) {
    constexpr int V = decltype(width)::value;
    if (plan.kernel == CsrKernel::kWarpPerRow)
      backward_warp_row<T, V>(a, grad_y, grad_b, n, stream);
    else
      backward_balanced<T, V>(a, grad_y, grad_b, n, plan, part, stream);
  });
}

#define INSTANTIATE(T)                                                                                       \
  template void csr_matmul_cuda<T>(const int64_t*, const int64_t*, const T*, const T*, T*, int64_t, int64_t, \
                                   int64_t, int64_t, const CsrPlan&, int64_t*, T*, int*, cudaStream_t);      \
  template void csr_matmul_backward_cuda<T>(const int64_t*, const int64_t*, const T*, const T*, T*, int64_t, \
                                            int64_t, int64_t, int64_t, const CsrPlan&, int64_t*, int*,       \
                                            cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(double)
