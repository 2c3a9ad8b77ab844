// kernels/fused_bias_relu/fused_bias_relu_cpu.h: what kernels/fused_bias_relu/fused_bias_relu.cpp and the
// torch-free parts share, in plain C++ (no torch, no CUDA): the Saved and BiasSums choices, and the learner's
// CPU functions compiled by fused_bias_relu.exercises.cpp (kernels/exercises/bias_grad.cuh Part 1,
// kernels/exercises/bias_check.h).
#pragma once

#include <cstdint>
#include <string>

// What backward reads to know where relu let the gradient through (relu'(z) = 1 where z > 0, else 0).
enum class Saved {
  kInput,   // x (and bias): recompute z = x * scale + bias
  kOutput,  // y = relu(z): z > 0 exactly where y > 0
  kMask,    // a 1-byte mask (a bool tensor) written by forward
  kBits,    // a bit mask written by forward v3: bit e % 32 of 32-bit word e / 32 for flat element e
};

// How backward adds grad_bias's column sums: the `version` argument (1..4) of backward and backward_from_mask
// (fused_bias_relu.cu's header says why each is faster).
enum class BiasSums {
  kPartials = 1,     // v1: per-block partial sums, then sum_partials_kernel adds them in a fixed order
  kCooperative = 2,  // v2: the same kernel adds them after grid.sync (v1 where it cannot launch so)
  kPerColumn = 3,    // v3: grad_x without sums, then a pass of its own, one thread per column (from y)
  kBlockSums = 4,    // v4: grad_x without sums, then your bias_grad kernels: per-block partials, then a sum
};

// Backward v4's grad_bias on the CPU (yours, bias_grad.cuh Part 1): T is float or double.
template <typename T>
void bias_grad_cpu(const T* grad_y, const T* y, T* grad_bias, int64_t rows, int64_t cols);

// "" when bias fits x, else the message for the ValueError (yours, bias_check.h).
std::string fbr_bias_shape_problem(const int64_t* x_sizes, int x_dim, const int64_t* bias_sizes,
                                   int bias_dim);
