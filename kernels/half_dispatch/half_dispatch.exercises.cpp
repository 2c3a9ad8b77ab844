// kernels/half_dispatch/half_dispatch.exercises.cpp: lesson 05's third exercise
// (kernels/exercises/half_dispatch.cuh) on the CPU: its dispatch() picks the types, its sum_squares() sums
// each row in one call. No torch header here, so editing the exercise recompiles this file in about a second.
#include "half_dispatch.cuh"

#include "half_dispatch.h"

namespace {

template <typename T, typename A>
void rows(const T* x, Stat<T>* out, int64_t begin, int64_t end, int64_t N) {
  for (int64_t r = begin; r < end; ++r) {
    A sum = A(float_of(0x7fc00000u));  // NaN: what an unwritten sum leaves
    sum_squares<T, A>(x + r * N, N, 0, 1, &sum);
    out[r] = static_cast<Stat<T>>(sum) / static_cast<Stat<T>>(N);
  }
}

}  // namespace

bool half_dispatch_cpu(DType dtype, const void* x, void* out, int64_t begin, int64_t end, int64_t N,
                       bool sum_in_dtype) {
  return dispatch(dtype, [&](auto t, auto a) {
    using T = decltype(t);
    using A = decltype(a);
    if (sum_in_dtype)
      rows<T, T>(static_cast<const T*>(x), static_cast<Stat<T>*>(out), begin, end, N);
    else
      rows<T, A>(static_cast<const T*>(x), static_cast<Stat<T>*>(out), begin, end, N);
  });
}
