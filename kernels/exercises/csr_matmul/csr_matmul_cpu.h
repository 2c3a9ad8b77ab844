// csr_matmul_cpu.h: the CPU loops of csr_matmul.cpu.cpp, as csr_matmul.cpp sees them. Plain C++ on raw
// pointers (no torch headers, so that an edit recompiles that small file alone). T is float or double; the
// sums run in T.
//
// A is M x K in CSR: crow [M + 1] (row i's nonzeros are crow[i] .. crow[i+1] - 1, crow[0] = 0, crow[M] =
// nnz), col [nnz] in [0, K) and val [nnz]; csr_matmul.cpp checks all of that before these loops run.
#pragma once

#include <cstdint>

// Rows [begin, end) of y = A @ b, for b [K, n] and y [M, n], contiguous: csr_matmul.cpp splits the rows over
// threads (at::parallel_for). Every row of y is written, an empty one with zeros.
template <typename T>
void csr_rows_cpu(const int64_t* crow, const int64_t* col, const T* val, const T* b, T* y, int64_t begin,
                  int64_t end, int64_t n);

// A^T in CSR (A in CSC): t_crow [K + 1], zero on entry, t_col [nnz] (the rows of A) and t_val [nnz]. Within a
// column of A the nonzeros keep their row order, so that backward adds them in the same order on every run.
template <typename T>
void csr_transpose_cpu(const int64_t* crow, const int64_t* col, const T* val, int64_t m, int64_t k,
                       int64_t* t_crow, int64_t* t_col, T* t_val);
