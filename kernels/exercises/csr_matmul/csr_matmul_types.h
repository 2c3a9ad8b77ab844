// csr_matmul_types.h: what csr_matmul.cpp and csr_matmul.cu both name, in plain C++ (no CUDA, no torch), so
// that CPU builds have it too: which kernels run (Python's kernel="...") and the kinds of bad index.
#pragma once

#include <utility>

enum class CsrKernel {
  kAuto,  // kBalanced: telling a skewed matrix from an even one needs the row lengths, which are on the
          // GPU, and reading them back would wait for it on every call; the balanced kernels cost an even
          // matrix two short launches more (the partition and the carries' fix-up)
  kWarpPerRow,  // v1: one warp per row of A; a row of 10^5 nonzeros is one warp's work while the others idle
  kBalanced,    // v2: every warp the same number of rows' ends + nonzeros (merge path): a long row is split
};

// The names Python uses, in the order the enum lists them. The CPU has one loop and takes any of them.
inline constexpr std::pair<CsrKernel, const char*> kCsrKernelNames[] = {
    {CsrKernel::kAuto, "auto"},
    {CsrKernel::kWarpPerRow, "warp_per_row"},
    {CsrKernel::kBalanced, "balanced"},
};

// Bad indices, as bits: the CPU check finds them before its loops read through them, the GPU's kernels set
// them in a flag (and never read outside the arrays because of them) that the glue reads once the kernels are
// done.
constexpr int kBadCrowStart = 1;  // crow_indices[0] != 0
constexpr int kBadCrowOrder = 2;  // crow_indices[i + 1] < crow_indices[i] for some row i
constexpr int kBadCrowEnd = 4;    // crow_indices[M] != nnz
constexpr int kBadCol = 8;        // a column index outside [0, K)
