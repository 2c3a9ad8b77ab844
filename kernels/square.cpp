// kernels/square.cpp: the PyTorch side of lesson 02's exercise, y = x * x, as a C++ autograd Function.
//
//   forward(x, version=2) -> y                      y = x * x
//   backward(grad_y, x, version=2) -> grad_x        grad_x = 2 * x * grad_y
//   square(x, version=2) -> y                       differentiable: SquareFunction (below)
//
// version 1 runs your kernels (kernels/exercises/square.cuh, Part 2), version 2 the course's (square.cu's
// header); on the CPU both run your Part 1 loops (float and double; float16/bfloat16 go through float, the
// type their math is done in anyway). x is any float32/float64/float16/bfloat16 tensor. This file checks the
// inputs, allocates the outputs, picks the dtype and calls square.h's functions on PyTorch's current stream.
#include "square.h"

#include <torch/autograd.h>

#include "checks.h"

namespace {

constexpr int64_t kDefaultVersion = 2;

}  // namespace

at::Tensor forward(const at::Tensor& x_in, int64_t version) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  check_version(version, 2);
  const at::Tensor x = x_in.contiguous();
  if (x.numel() == 0) return at::empty_like(x);
  if (x.is_cpu())
    return on_cpu<1>([](const auto* a, auto* y, int64_t n) { square_forward_cpu(a, y, n); }, {x});
  at::Tensor y = at::empty_like(x);
#ifdef WITH_CUDA
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "square_forward", [&] {
    const OnDevice on(x);
    auto launch = version == 1 ? square_forward_v1<typename CudaType<scalar_t>::type>
                               : square_forward_v2<typename CudaType<scalar_t>::type>;
    launch(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(y), x.numel(), on.stream);
  });
#endif
  return y;
}

at::Tensor backward(const at::Tensor& grad_y_in, const at::Tensor& x_in, int64_t version) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  check_like(grad_y_in, "grad_y", x_in, "x");
  check_same_dtype(grad_y_in, "grad_y", x_in, "x");
  check_version(version, 2);
  const at::Tensor x = x_in.contiguous(), grad_y = grad_y_in.contiguous();
  if (x.numel() == 0) return at::empty_like(x);
  if (x.is_cpu())
    return on_cpu<2>(
        [](const auto* g, const auto* a, auto* gx, int64_t n) { square_backward_cpu(g, a, gx, n); },
        {grad_y, x});
  at::Tensor grad_x = at::empty_like(x);
#ifdef WITH_CUDA
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "square_backward", [&] {
    const OnDevice on(x);
    auto launch = version == 1 ? square_backward_v1<typename CudaType<scalar_t>::type>
                               : square_backward_v2<typename CudaType<scalar_t>::type>;
    launch(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(grad_x), x.numel(),
           on.stream);
  });
#endif
  return grad_x;
}

// The seed's pattern: a class deriving from torch::autograd::Function with static forward and backward.
// forward saves x (ctx->save_for_backward) and the version (ctx->saved_data, for numbers); backward
// returns one gradient per forward argument: grad_x, and none for the version.
class SquareFunction : public torch::autograd::Function<SquareFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t version) {
    ctx->save_for_backward({x});
    ctx->saved_data["version"] = version;
    return ::forward(x, version);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const int64_t version = ctx->saved_data["version"].toInt();
    return {::backward(grad_outputs[0], x, version), at::Tensor()};  // d(x^2)/dx = 2x, times grad_y
  }
};

at::Tensor square(const at::Tensor& x, int64_t version) { return SquareFunction::apply(x, version); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "y = x * x as a C++ autograd Function (lesson 02's exercise): version 1 is yours, 2 the course's";
  m.def("forward", &forward, "y = x * x", py::arg("x"), py::arg("version") = kDefaultVersion);
  m.def("backward", &backward, "grad_x = 2 * x * grad_y", py::arg("grad_y"), py::arg("x"),
        py::arg("version") = kDefaultVersion);
  m.def("square", &square, "differentiable x * x (SquareFunction)", py::arg("x"),
        py::arg("version") = kDefaultVersion);
}
