// kernels/polynomial/polynomial_cpu.h: the CPU version 1 of forward, as kernels/polynomial/polynomial.cpp
// sees it. It is exercise 1's Part 1 (kernels/exercises/polynomial_forward.cuh), compiled for float and
// double in kernels/polynomial/polynomial.exercises.cpp, a file without torch headers: an edit to the
// exercise recompiles that file in about a second, not the glue. Plain C++ (no torch, no CUDA);
// coeffs = [a, b, c, d] in T. float16 and bfloat16 go through float.
#pragma once

#include <cstdint>

template <typename T>
void poly_forward_v1_cpu(const T* x, const T* coeffs, T* y, int64_t n);

extern template void poly_forward_v1_cpu<float>(const float*, const float*, float*, int64_t);
extern template void poly_forward_v1_cpu<double>(const double*, const double*, double*, int64_t);
