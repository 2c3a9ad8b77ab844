// Exercise (lesson 02): one piece of the C++ glue, the check of bias's shape, with a clear message.
//
// fused_bias_relu(x, bias, scale) takes x of shape [..., C] and bias of shape [C]: one value per column, the
// last dimension of x. kernels/fused_bias_relu/fused_bias_relu.cpp calls your function before anything runs,
// and raises the message you return as a ValueError in Python (TORCH_CHECK_VALUE):
//
//     >>> ext.forward(torch.ones(5, 64), torch.ones(3, 64))
//     ValueError: bias must have shape [C] = [64] to match x's last dimension, got [3, 64]
//
// A good message names the argument (bias), what was expected ([64]) and what it got ([3, 64], or [] for a
// 0-d tensor). Plain C++, no torch: the sizes come as arrays. About 4 lines.
#pragma once

#include <cstdint>
#include <string>

// "[3, 64]" for sizes {3, 64}, "[]" for none: the way torch and kernels/common/checks.h write shapes. Use it.
inline std::string sizes_str(const int64_t* sizes, int dim) {
  std::string out = "[";
  for (int i = 0; i < dim; ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

// "" when bias (bias_dim sizes in bias_sizes) fits x (x_dim >= 1 sizes in x_sizes), else the message.
inline std::string bias_shape_problem(const int64_t* x_sizes, int x_dim, const int64_t* bias_sizes,
                                      int bias_dim) {
  std::string problem;  // "": bias is fine
  // BEGIN SOLUTION
  const int64_t c = x_sizes[x_dim - 1];
  if (bias_dim != 1 || bias_sizes[0] != c)
    problem = "bias must have shape [C] = [" + std::to_string(c) + "] to match x's last dimension, got " +
              sizes_str(bias_sizes, bias_dim);
  // END SOLUTION
  return problem;
}
