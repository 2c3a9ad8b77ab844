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

// BEGIN SOLUTION
at::Tensor square_forward(const at::Tensor& x_in) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  const at::Tensor x = x_in.contiguous();  // the functions take n elements one after the other
  at::Tensor y = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "square_forward", [&] {
    if (x.is_cpu()) return square_forward_cpu(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel());
#ifdef WITH_CUDA
    const OnDevice on(x);
    square_forward_v2(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(y), x.numel(), on.stream);
#endif
  });
  return y;
}

at::Tensor square_backward(const at::Tensor& grad_y_in, const at::Tensor& x_in) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  check_like(grad_y_in, "grad_y", x_in, "x");
  check_same_dtype(grad_y_in, "grad_y", x_in, "x");
  const at::Tensor x = x_in.contiguous(), grad_y = grad_y_in.contiguous();
  at::Tensor grad_x = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "square_backward", [&] {
    if (x.is_cpu())
      return square_backward_cpu(grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(),
                                 grad_x.data_ptr<scalar_t>(), x.numel());
#ifdef WITH_CUDA
    const OnDevice on(x);
    square_backward_v2(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(grad_x),
                       x.numel(), on.stream);
#endif
  });
  return grad_x;
}

class SquareFunction : public torch::autograd::Function<SquareFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return square_forward(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    return {square_backward(grad_outputs[0], x)};
  }
};

at::Tensor square(const at::Tensor& x) { return SquareFunction::apply(x); }
// END SOLUTION

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "y = x * x, your glue, C++ autograd Function and binding (lesson 02b) over the course's kernels";
  // BEGIN SOLUTION
  m.def("forward", &square_forward, "y = x * x", py::arg("x"));
  m.def("backward", &square_backward, "grad_x = 2 * x * grad_y", py::arg("grad_y"), py::arg("x"));
  m.def("square", &square, "y = x * x, differentiable (SquareFunction)", py::arg("x"));
  // END SOLUTION
}
