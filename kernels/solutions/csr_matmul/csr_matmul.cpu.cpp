// csr_matmul.cpu.cpp: sparse (CSR) times dense on the CPU, row by row, and the transpose that backward runs
// the same loop on (csr_matmul_cpu.h).
#include <vector>

#include "csr_matmul_cpu.h"

template <typename T>
void csr_rows_cpu(const int64_t* crow, const int64_t* col, const T* val, const T* b, T* y, int64_t begin,
                  int64_t end, int64_t n) {
  for (int64_t r = begin; r < end; ++r) {
    T* out = y + r * n;
    // BEGIN SOLUTION
    for (int64_t j = 0; j < n; ++j) out[j] = T(0);
    for (int64_t i = crow[r]; i < crow[r + 1]; ++i) {
      const T v = val[i];
      const T* in = b + col[i] * n;
      for (int64_t j = 0; j < n; ++j) out[j] += v * in[j];
    }
    // END SOLUTION
  }
}

// A counting sort by column: count each column's nonzeros, turn the counts into starts (a running sum), then
// place the nonzeros row by row, each at the next free slot of its column.
template <typename T>
void csr_transpose_cpu(const int64_t* crow, const int64_t* col, const T* val, int64_t m, int64_t k,
                       int64_t* t_crow, int64_t* t_col, T* t_val) {
  // BEGIN SOLUTION
  const int64_t nnz = crow[m];
  for (int64_t i = 0; i < nnz; ++i) ++t_crow[col[i] + 1];
  for (int64_t c = 0; c < k; ++c) t_crow[c + 1] += t_crow[c];
  std::vector<int64_t> next(t_crow, t_crow + k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = crow[r]; i < crow[r + 1]; ++i) {
      const int64_t slot = next[col[i]]++;
      t_col[slot] = r;
      t_val[slot] = val[i];
    }
  // END SOLUTION
}

#define INSTANTIATE(T)                                                                                     \
  template void csr_rows_cpu<T>(const int64_t*, const int64_t*, const T*, const T*, T*, int64_t, int64_t,  \
                                int64_t);                                                                  \
  template void csr_transpose_cpu<T>(const int64_t*, const int64_t*, const T*, int64_t, int64_t, int64_t*, \
                                     int64_t*, T*);
INSTANTIATE(float)
INSTANTIATE(double)
