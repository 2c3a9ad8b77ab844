// kernels/polynomial/polynomial.exercises.cpp: lesson 01's exercise 1, CPU part (Part 1 of
// kernels/exercises/polynomial_forward.cuh), compiled for float and double.
// No torch headers here on purpose: editing the exercise recompiles this file in about a second.
#include "polynomial_cpu.h"
#include "polynomial_forward.cuh"

template void poly_forward_v1_cpu<float>(const float*, const float*, float*, int64_t);
template void poly_forward_v1_cpu<double>(const double*, const double*, double*, int64_t);
