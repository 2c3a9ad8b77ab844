// csr_matmul.h: the CUDA launchers of csr_matmul.cu, as csr_matmul.cpp sees them. Raw pointers, sizes and a
// stream in, nothing from torch, so that an edit to the kernels recompiles csr_matmul.cu alone.
//
// A is M x K in CSR: crow [M + 1] (row i's nonzeros are crow[i] .. crow[i+1] - 1), col [nnz] and val [nnz].
// b is the dense [K, n] matrix (n = 1 for a vector), y the [M, n] result, both contiguous. T is float or
// double, and the sums run in T.
//
// Bad indices never make a kernel read or write outside the arrays: csr_check_cuda and the product kernels
// set bits of *bad (kBad..., csr_matmul_types.h), which csr_read_flag_cuda brings back once the kernels are
// done.
#pragma once

#include "common/common.h"
#include "csr_matmul_types.h"

// Which kernels run for these sizes, and the scratch the balanced ones need: `warps` warps of `items` merge
// items each (a merge item is a nonzero or the end of a row). Forward needs part [warps + 1] int64 (the row
// where each warp's share starts) and carry [warps * n] of T (each warp's sum for the row it leaves
// unfinished); backward needs part only. warps is 0 for kWarpPerRow.
struct CsrPlan {
  CsrKernel kernel;  // kWarpPerRow or kBalanced (kAuto resolved)
  int64_t items;
  int64_t warps;
};
CsrPlan csr_plan(int64_t m, int64_t nnz, CsrKernel kernel);

// crow's three rules always, and col's range where check_col (the product kernels check the columns they
// read; a call that runs none of them, with an empty output, asks for it here).
void csr_check_cuda(const int64_t* crow, const int64_t* col, int64_t m, int64_t k, int64_t nnz,
                    bool check_col, int* bad, cudaStream_t stream);

// *bad once the stream's work is done (this waits for it), or -1 while the stream is being captured into a
// CUDA graph, where nothing may wait: the kernels then only skip what is bad.
int csr_read_flag_cuda(const int* bad, cudaStream_t stream);

// y = A @ b. Needs m > 0, n > 0 and k > 0.
template <typename T>
void csr_matmul_cuda(const int64_t* crow, const int64_t* col, const T* val, const T* b, T* y, int64_t m,
                     int64_t k, int64_t nnz, int64_t n, const CsrPlan& plan, int64_t* part, T* carry,
                     int* bad, cudaStream_t stream);

// grad_b += A^T @ grad_y (grad_b [K, n] zeroed by the caller: the kernels add into it). Needs m > 0, n > 0
// and k > 0.
template <typename T>
void csr_matmul_backward_cuda(const int64_t* crow, const int64_t* col, const T* val, const T* grad_y,
                              T* grad_b, int64_t m, int64_t k, int64_t nnz, int64_t n, const CsrPlan& plan,
                              int64_t* part, int* bad, cudaStream_t stream);
