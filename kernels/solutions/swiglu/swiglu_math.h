// swiglu_math.h: SwiGLU's math on one element, in A (float, or double for float64 tensors), for the CPU loops
// (swiglu.cpu.cpp) and the CUDA kernels (swiglu.cu) alike, so that both compute the same thing the same way.
//
//   y      = silu(g) * u            silu(g) = g * s,  s = sigmoid(g) = 1 / (1 + exp(-g))
//   grad_u = grad_y * silu(g)
//   grad_g = grad_y * u * s * (1 + g * (1 - s))      d silu / dg = s + g * s * (1 - s)
//
// s is recomputed from g in backward rather than saved by forward: one more exp per element, against a
// [rows, h] tensor written in forward and read in backward (a third of forward's bytes again).
// exp(-g) overflows to inf for g < -88 and s is then 0, the right limit; nothing here divides by zero.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define SWIGLU_HD __host__ __device__ __forceinline__
#else
#define SWIGLU_HD inline
#endif

SWIGLU_HD float swiglu_exp(float v) {
#ifdef __CUDA_ARCH__
  return expf(v);
#else
  return std::exp(v);
#endif
}
SWIGLU_HD double swiglu_exp(double v) {
#ifdef __CUDA_ARCH__
  return ::exp(v);
#else
  return std::exp(v);
#endif
}

template <typename A>
SWIGLU_HD A swiglu_sigmoid(A g) {
  return A(1) / (A(1) + swiglu_exp(-g));
}

template <typename A>
SWIGLU_HD A swiglu_y(A g, A u) {
  return g * swiglu_sigmoid(g) * u;
}

// grad_g and grad_u from grad_y (gy), g and u.
template <typename A>
SWIGLU_HD void swiglu_grads(A gy, A g, A u, A& grad_g, A& grad_u) {
  const A s = swiglu_sigmoid(g);
  grad_u = gy * g * s;
  grad_g = gy * u * s * (A(1) + g * (A(1) - s));
}
