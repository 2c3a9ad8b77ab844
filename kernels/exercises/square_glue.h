// Exercise (lesson 02b): the PyTorch side of your own op, y = x * x, with its backward
// grad_x = dL/dx = 2 * x * grad_y. The kernels are the course's (kernels/square/square.h: CPU loops and CUDA
// launchers that take raw pointers); you write everything between them and Python:
//
//   at::Tensor square_forward(const at::Tensor& x)                          -> y
//   at::Tensor square_backward(const at::Tensor& grad_y, const at::Tensor& x) -> grad_x
//       the glue: check the arguments (a bad one raises an error whose message names it: x or grad_y),
//       allocate the output, pick the dtype (float32, float64, float16, bfloat16) and call the course's
//       function for the tensor's device, on PyTorch's current stream for a CUDA tensor;
//   SquareFunction, a C++ torch::autograd::Function (as part 1's FusedBiasReluFunction)
//       its forward saves what backward needs and returns y; its backward returns the gradient of each
//       forward input;
//   at::Tensor square(const at::Tensor& x)                                  -> y, differentiable;
//   the binding, in PYBIND11_MODULE below: Python's ext.forward(x), ext.backward(grad_y, x) and
//       ext.square(x), with ext = loader.load("square").
//
// kernels/square/square.glue.cpp compiles this file alone, after torch's headers (ATen, torch/autograd.h,
// pybind11), kernels/common/checks.h and kernels/square/square.h: an edit rebuilds that one file. About 50
// lines. Check your work with the self-check cell in lesson 02b.
#pragma once

// TODO(exercise): your code here (the solution is 46 lines).

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "y = x * x, your glue, C++ autograd Function and binding (lesson 02b) over the course's kernels";
  // TODO(exercise): your code here (the solution is 3 lines).
}
