// csr_matmul.cpu.cpp: sparse (CSR) times dense on the CPU, row by row, and the transpose that backward runs
// the same loop on (csr_matmul_cpu.h).
#include <vector>

#include "csr_matmul_cpu.h"

template <typename T>
void csr_rows_cpu(const int64_t* crow, const int64_t* col, const T* val, const T* b, T* y, int64_t begin,
                  int64_t end, int64_t n) {
  for (int64_t r = begin; r < end; ++r) {
    T* out = y + r * n;
    // TODO(exercise): your code here (the solution is 6 lines).
  }
}

// A counting sort by column: count each column's nonzeros, turn the counts into starts (a running sum), then
// place the nonzeros row by row, each at the next free slot of its column.
template <typename T>
void csr_transpose_cpu(const int64_t* crow, const int64_t* col, const T* val, int64_t m, int64_t k,
                       int64_t* t_crow, int64_t* t_col, T* t_val) {
  // TODO(exercise): your code here (the solution is 10 lines).
}

#define INSTANTIATE(T)                                                                                     \
  template void csr_rows_cpu<T>(const int64_t*, const int64_t*, const T*, const T*, T*, int64_t, int64_t,  \
                                int64_t);                                                                  \
  template void csr_transpose_cpu<T>(const int64_t*, const int64_t*, const T*, int64_t, int64_t, int64_t*, \
                                     int64_t*, T*);
INSTANTIATE(float)
INSTANTIATE(double)
