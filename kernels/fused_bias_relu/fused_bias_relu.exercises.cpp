// kernels/fused_bias_relu/fused_bias_relu.exercises.cpp: compiles lesson 02's CPU exercises for
// kernels/fused_bias_relu/fused_bias_relu.cpp: Part 1 of your kernels/exercises/bias_grad.cuh (float and
// double) and your kernels/exercises/bias_check.h. No torch headers: an edit to either recompiles this file
// in about a second.
#include "bias_check.h"
#include "bias_grad.cuh"
#include "fused_bias_relu_cpu.h"

template void bias_grad_cpu<float>(const float*, const float*, float*, int64_t, int64_t);
template void bias_grad_cpu<double>(const double*, const double*, double*, int64_t, int64_t);

std::string fbr_bias_shape_problem(const int64_t* x_sizes, int x_dim, const int64_t* bias_sizes,
                                   int bias_dim) {
  return bias_shape_problem(x_sizes, x_dim, bias_sizes, bias_dim);
}
