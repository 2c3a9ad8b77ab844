// masked_softmax.cpu.cpp: attention's masked softmax on the CPU, row by row (masked_softmax_cpu.h), with the
// masks of masked_softmax_math.h and the math in SoftmaxAcc<T> (float, double for double).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "masked_softmax_cpu.h"
#include "masked_softmax_math.h"

template <typename T>
void masked_softmax_forward_cpu(const T* x, T* y, const SoftmaxRows& s, double scale, int64_t begin,
                                int64_t end) {
  using A = SoftmaxAcc<T>;
  constexpr A kMasked = -std::numeric_limits<A>::infinity();
  const A c = static_cast<A>(scale);
  // The row's scaled scores, then their exponentials: one buffer per task, not one per row.
  std::vector<A> z(s.Lk);
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * s.Lk;
    T* yr = y + r * s.Lk;
    // BEGIN SOLUTION
    const int64_t limit = key_limit(s, r);
    const bool* keep = keep_row(s, r);
    A m = kMasked;  // the largest kept score: exp(z - m) <= 1 cannot overflow
    for (int64_t j = 0; j < s.Lk; ++j) {
      z[j] = j < limit && (keep == nullptr || keep[j]) ? c * static_cast<A>(xr[j]) : kMasked;
      m = std::max(m, z[j]);
    }
    if (m == kMasked) m = 0;  // no key kept: exp(-inf - 0) = 0 below, where exp(-inf - -inf) would be NaN
    A sum = 0;
    for (int64_t j = 0; j < s.Lk; ++j) {
      z[j] = std::exp(z[j] - m);  // a masked key: exp(-inf) = 0
      sum += z[j];
    }
    const A inv = sum > 0 ? A(1) / sum : A(0);  // no key kept: a row of zeros, not 0/0
    for (int64_t j = 0; j < s.Lk; ++j) yr[j] = static_cast<T>(z[j] * inv);
    // END SOLUTION
  }
}

template <typename T>
void masked_softmax_backward_cpu(const T* grad_y, const T* y, T* grad_x, int64_t Lk, double scale,
                                 int64_t begin, int64_t end) {
  using A = SoftmaxAcc<T>;
  const A c = static_cast<A>(scale);
  for (int64_t r = begin; r < end; ++r) {
    const T* gy = grad_y + r * Lk;
    const T* yr = y + r * Lk;
    T* gx = grad_x + r * Lk;
    // BEGIN SOLUTION
    A dot = 0;
    for (int64_t j = 0; j < Lk; ++j) dot += static_cast<A>(gy[j]) * static_cast<A>(yr[j]);
    for (int64_t j = 0; j < Lk; ++j)
      gx[j] = static_cast<T>(c * static_cast<A>(yr[j]) * (static_cast<A>(gy[j]) - dot));
    // END SOLUTION
  }
}

#define INSTANTIATE(T)                                                                                     \
  template void masked_softmax_forward_cpu<T>(const T*, T*, const SoftmaxRows&, double, int64_t, int64_t); \
  template void masked_softmax_backward_cpu<T>(const T*, const T*, T*, int64_t, double, int64_t, int64_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(c10::Half)
INSTANTIATE(c10::BFloat16)
