// kernels/norm_engine/exchange.cuh: how the blocks of a thread block cluster (sm_90) that share a row meet
// their row sums, and the start of the bulk kernels' ring of stages.
//
//   cluster_sum, cluster_done  row sums across the cluster through distributed shared memory, after a
//                              cluster barrier (backward_kernel and forward_long_kernel over clusters)
//   RingCursor, start_ring, fill_ring  the bulk kernels' ring: an mbarrier per stage, the first rows' copies
//   deliver_sums               a row's sums pushed into every block of the cluster by st.async, each counted
//                              on the receiving block's mbarrier: no cluster barrier per row
#pragma once

#include <cooperative_groups.h>

#include "bulk_copy.cuh"
#include "row.cuh"

namespace norm_engine {

// Row sums across the kCluster blocks of a thread block cluster (sm_90) that share a row, each block holding
// a slice of it: every block puts its group's totals (group_sum's, K values per row group) into `slot` in its
// own shared memory, the cluster synchronizes, and every block adds the kCluster blocks' values read through
// distributed shared memory in rank order, so all get the same bits. A slot may be written again once every
// block has passed the next cluster barrier (it has read this one by then). kCluster == 1: nothing to do.
template <int kCluster, int K, typename acc_t>
__device__ __forceinline__ void cluster_sum(acc_t (&v)[K], acc_t* slot) {
  if constexpr (kCluster > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    if (threadIdx.x == 0)
#pragma unroll
      for (int k = 0; k < K; ++k) slot[threadIdx.y * K + k] = v[k];
    cluster.sync();
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = 0;
    for (int r = 0; r < kCluster; ++r) {
      const acc_t* remote = cluster.map_shared_rank(slot, r);
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] += remote[threadIdx.y * K + k];
    }
#else
    __trap();  // launched only on sm_90 and newer
#endif
  }
}

// The end of a cluster kernel: no block leaves (freeing its shared memory) while another may still read it.
template <int kCluster>
__device__ __forceinline__ void cluster_done() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCluster > 1) cooperative_groups::this_cluster().sync();
#endif
}

// The start of the bulk-copy kernels (forward_bulk_kernel, backward_bulk_kernel), sm_90: thread 0
// initializes an mbarrier per stage of the ring (one arrival, plus the bytes its copies announce) and per
// exchange slot (deliver_sums); the cluster (or block) synchronizes, so that no block arrives on a barrier
// not yet initialized; then thread 0 starts the first `first` rows' copies, fetch(row k, stage k), and
// fill_ring the others once row 0 has landed (config.h: first_rows says why). (Started before
// the barrier, on the block's own barriers, they made the backward 1-3 us slower: the other threads' loads
// of the weights, which the first row waits for, then queue behind them.)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// A row's stage in the ring and the phase parity its mbarrier completes with, counted row by row: k % stages
// and k / stages (stages known at run time) cost a 32-bit division per pass per row, whose chain of
// dependent instructions held every warp at once: 9 % of the backward's stall samples (Nsight Compute).
struct RingCursor {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++stage == stages) stage = 0, phase ^= 1;
  }
};

template <typename Fetch>
__device__ __forceinline__ void start_ring(uint64_t* bars, int stages, uint64_t* xbars, int slots, int C,
                                           int64_t rows, int first, const Fetch& fetch) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) bulk::init(&bars[s], 1);
    for (int s = 0; s < slots; ++s) bulk::init(&xbars[s], 1);  // (the block's own arrival, plus C deliveries)
    bulk::fence_init();
  }
  if (C > 1)
    cooperative_groups::this_cluster().sync();
  else
    __syncthreads();
  wait_for_previous_grid();  // (PDL) the kernel before this one is done: its outputs may be read
  if (threadIdx.x == 0)
    for (int s = 0; s < first && s < stages && s < rows; ++s) fetch(s, s);
}

// The rest of the ring's first rows (stages first, first + 1, ...), which thread 0 starts once row 0 is in.
template <typename Fetch>
__device__ __forceinline__ void fill_ring(int stages, int64_t rows, int first, const Fetch& fetch) {
  if (threadIdx.x == 0)
    for (int s = first; s < stages && s < rows; ++s) fetch(s, s);
}

// The bulk kernels' exchange of row k's K numbers (threads 0..C-1 of each block): thread r stores them into
// block r's slot k % X by st.async, each float counted on that slot's mbarrier as it lands; thread 0 also
// makes the block's own arrival there, announcing the C K floats the phase waits for. The slot's next phase
// is row k + X: no block starts that row's exchange before it has gathered row k + X - 2 (which needs
// every block's row k + X - 2 delivery, made after its row k one), so row k's phase is long complete.
template <int K, int X>
__device__ __forceinline__ void deliver_sums(float (&slots)[X][8][K], uint64_t (&xbars)[X], int64_t k, int C,
                                             int rank, const float (&sums)[K]) {
  const int x = int(k % X);
  if (threadIdx.x == 0) bulk::arrive_expect(&xbars[x], uint32_t(C * K * sizeof(float)));
#pragma unroll
  for (int q = 0; q < K; ++q) bulk::store_async_remote(&slots[x][rank][q], threadIdx.x, sums[q], &xbars[x]);
}
#endif

}  // namespace norm_engine
