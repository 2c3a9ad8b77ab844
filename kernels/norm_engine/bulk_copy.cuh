// kernels/norm_engine/bulk_copy.cuh: the few PTX instructions of Hopper's asynchronous copies that the
// course's kernels use (defined for sm_90+ device code only: their callers sit under the same #if): a bulk
// copy by the Tensor Memory Accelerator (cp.async.bulk, global -> shared memory, one instruction for up to a
// whole row), a 4-byte cp.async, the mbarrier that counts their bytes, and a thread block cluster's stores
// into another block's shared memory, counted on that block's mbarrier. Used by lesson 03's
// backward_v2_bulk_kernel (layernorm.hopper.cu) and lesson 05's backward_bulk_kernel and forward_bulk_kernel
// (forward.cuh, backward.cuh).
//
// How an mbarrier counts: init(bar, count) expects `count` arrivals per phase; arrive_expect also announces
// bytes of copies to come, and the phase completes when all arrivals and all those bytes are in. A waiter
// names the phase's parity (0, 1, 0, ...: a ring of buffers flips it each time round).
#pragma once

#include <cstdint>

namespace bulk {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also announces `bytes` of bulk copies to come on this barrier's current phase.
__device__ __forceinline__ void arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile(
      "{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(smem_addr(bar)),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void arrive(uint64_t* bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(smem_addr(bar))
               : "memory");
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory.
__device__ __forceinline__ void copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
// 4 bytes by cp.async; the barrier gets this thread's arrival once its earlier cp.asyncs have landed.
__device__ __forceinline__ void copy4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void arrive_after_copies(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
}
// Thread block clusters: the address of the same variable in block `rank`'s shared memory (distributed
// shared memory); a float stored there by st.async, which counts its 4 bytes on that block's mbarrier `bar`
// (complete_tx) when they land; and a wait, at cluster scope, for such a barrier's phase. No fence: the
// first exchange stored with st.shared::cluster and then arrived with mbarrier.arrive.release.cluster, and
// a release waits until every earlier store of the thread has landed, global ones included (Nsight
// Compute's "membar" stall, the largest in the engine's bulk kernels, whose threads store a row of
// the output just before the exchange).
__device__ __forceinline__ uint32_t remote(const void* p, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
  return r;
}
__device__ __forceinline__ void store_async_remote(float* p, int rank, float v, uint64_t* bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(remote(p, rank)),
      "f"(v), "r"(remote(bar, rank))
      : "memory");
}
__device__ __forceinline__ void wait_cluster(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, "
        "1, 0, "
        "p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
}
#endif
}  // namespace bulk
