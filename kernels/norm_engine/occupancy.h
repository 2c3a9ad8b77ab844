// kernels/norm_engine/occupancy.h: the host side's sizes and the CUDA runtime's answers about a kernel, for
// every norm kernel's plan (lesson 03's ladder, the engine, norm_dropout).
//
//   row_threads, vectorizable   threads per row (whole warps, at most 1024), and whether 16-byte packs apply
//   blocks_per_sm, active_clusters, ptx_version  the runtime's occupancy answers, asked once per device and
//                               kept (each query costs microseconds of CPU time per call)
#pragma once

#include <initializer_list>
#include <mutex>
#include <vector>

#include "common/common.h"

namespace norm_engine {

// Threads per row for `packs` packs at `per_thread` packs each: whole warps, at most 1024 (0 = too long).
inline int row_threads(int packs, int per_thread) {
  const int warps = ceil_div(ceil_div(packs, per_thread), 32);
  return warps <= 32 ? warps * 32 : 0;
}

template <typename T>
bool vectorizable(int N, std::initializer_list<const void*> ptrs) {
  if (N % kPack16<T> != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

// How many blocks of `threads` threads and `smem` bytes of dynamic shared memory of `kernel` fit on one SM of
// the current device (cudaOccupancyMaxActiveBlocksPerMultiprocessor), after raising the kernel's dynamic
// shared memory limit to smem where it was lower; and the PTX version a kernel was built for. The launchers
// plan on every call (backward v2 twice: the workspace size, then the launch), and each of these queries
// costs microseconds of CPU time per call, while the answers never change: so each is asked once per
// device and kept (a few entries; never freed). The limit is only ever raised: a lower one would break the
// launch of an earlier plan of the same kernel that needs more.
inline int blocks_per_sm(const void* kernel, int threads, size_t smem) {
  struct Fit {
    int device;
    const void* kernel;
    int threads;
    size_t smem;
    int blocks;
  };
  struct Limit {
    int device;
    const void* kernel;
    size_t smem;
  };
  static std::mutex mutex;
  static auto* fits = new std::vector<Fit>();
  static auto* limits = new std::vector<Limit>();
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  for (const Fit& f : *fits)
    if (f.device == device && f.kernel == kernel && f.threads == threads && f.smem == smem) return f.blocks;
  Limit* limit = nullptr;
  for (Limit& l : *limits)
    if (l.device == device && l.kernel == kernel) limit = &l;
  if (limit == nullptr) limit = &limits->emplace_back(Limit{device, kernel, 0});
  if (smem > limit->smem) {
    COURSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    limit->smem = smem;
  }
  int blocks = 0;
  COURSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  fits->push_back(Fit{device, kernel, threads, smem, blocks});
  return blocks;
}

// Clusters of `cluster` blocks of `kernel` resident at once on the current device (cached as blocks_per_sm
// is: the answer never changes, and asking costs microseconds per call).
inline int active_clusters(const void* kernel, int threads, size_t smem, int cluster) {
  struct Fit {
    int device;
    const void* kernel;
    int threads;
    size_t smem;
    int cluster, clusters;
  };
  static std::mutex mutex;
  static auto* fits = new std::vector<Fit>();
  if (blocks_per_sm(kernel, threads, smem) == 0) return 0;  // (also raises the kernel's shared memory limit)
  if (cluster == 1) return blocks_per_sm(kernel, threads, smem) * num_sms();
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  for (const Fit& f : *fits)
    if (f.device == device && f.kernel == kernel && f.threads == threads && f.smem == smem &&
        f.cluster == cluster)
      return f.clusters;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(cluster));
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim = {unsigned(cluster), 1, 1};
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  COURSE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  fits->push_back(Fit{device, kernel, threads, smem, cluster, clusters});
  return clusters;
}

inline int ptx_version(const void* kernel) {
  struct Known {
    int device;
    const void* kernel;
    int ptx;
  };
  static std::mutex mutex;
  static auto* known = new std::vector<Known>();
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  for (const Known& k : *known)
    if (k.device == device && k.kernel == kernel) return k.ptx;
  cudaFuncAttributes attrs;
  COURSE_CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
  known->push_back(Known{device, kernel, attrs.ptxVersion});
  return attrs.ptxVersion;
}

}  // namespace norm_engine
