// swiglu.cpu.cpp: SwiGLU on the CPU, row by row (swiglu_cpu.h), the math of swiglu_math.h in SwigluAcc<T>.
#include "swiglu_cpu.h"
#include "swiglu_math.h"

template <typename T>
void swiglu_forward_cpu(const T* x, T* y, int64_t begin, int64_t end, int64_t h) {
  using A = SwigluAcc<T>;
  for (int64_t r = begin; r < end; ++r) {
    const T* gate = x + r * 2 * h;
    const T* up = gate + h;
    T* out = y + r * h;
    for (int64_t j = 0; j < h; ++j) out[j] = static_cast<T>(swiglu_y(A(gate[j]), A(up[j])));
  }
}

template <typename T>
void swiglu_backward_cpu(const T* grad_y, const T* x, T* grad_x, int64_t begin, int64_t end, int64_t h) {
  using A = SwigluAcc<T>;
  for (int64_t r = begin; r < end; ++r) {
    const T* gate = x + r * 2 * h;
    const T* up = gate + h;
    const T* gy = grad_y + r * h;
    T* grad_gate = grad_x + r * 2 * h;
    T* grad_up = grad_gate + h;
    for (int64_t j = 0; j < h; ++j) {
      A gg, gu;
      swiglu_grads(A(gy[j]), A(gate[j]), A(up[j]), gg, gu);
      grad_gate[j] = static_cast<T>(gg);
      grad_up[j] = static_cast<T>(gu);
    }
  }
}

#define INSTANTIATE(T)                                                          \
  template void swiglu_forward_cpu<T>(const T*, T*, int64_t, int64_t, int64_t); \
  template void swiglu_backward_cpu<T>(const T*, const T*, T*, int64_t, int64_t, int64_t);
INSTANTIATE(float)
INSTANTIATE(double)
INSTANTIATE(c10::Half)
INSTANTIATE(c10::BFloat16)
