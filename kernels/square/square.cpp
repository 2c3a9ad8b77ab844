// kernels/square/square.cpp: the PyTorch side of lesson 02's exercise, y = x * x, as a C++ autograd Function,
// and (lesson 04) the same kernels as the torch.library ops course::square and course::square_backward.
//
//   forward(x, version=2) -> y                      y = x * x
//   backward(grad_y, x, version=2) -> grad_x        grad_x = 2 * x * grad_y
//   square(x, version=2) -> y                       differentiable: SquareFunction (below)
//   torch.ops.course.square(x), torch.ops.course.square_backward(grad_y, x)
//                                                   version 2 on the CPU and the GPU; no fake kernels and no
//                                                   autograd yet: lesson 04's exercises register them in
//                                                   Python
//
// version 1 runs your kernels (kernels/exercises/square.cuh: Part 1 on the CPU, Part 2 on the GPU), version 2
// the course's (the CPU loops below, square.cu's kernels), so the registered ops work whatever state lesson
// 02's exercise is in. x is any float32/float64/float16/bfloat16 tensor (float16/bfloat16 are computed in
// float). This file checks the inputs, allocates the outputs, picks the dtype and calls square.h's functions
// on PyTorch's current stream.
#include "square.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include "common/checks.h"

namespace {

constexpr int64_t kDefaultVersion = 2;
constexpr int64_t kGrain = 32768;  // elements per CPU task

// Version 2 on the CPU: the course's loops, computed in at::opmath_type (float for float16/bfloat16).
at::Tensor forward_v2_cpu(const at::Tensor& x) {
  at::Tensor y = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "square_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* a = x.data_ptr<scalar_t>();
    scalar_t* out = y.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = static_cast<scalar_t>(acc_t(a[i]) * acc_t(a[i]));
    });
  });
  return y;
}

at::Tensor backward_v2_cpu(const at::Tensor& grad_y, const at::Tensor& x) {
  at::Tensor grad_x = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "square_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* g = grad_y.data_ptr<scalar_t>();
    const scalar_t* a = x.data_ptr<scalar_t>();
    scalar_t* out = grad_x.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = static_cast<scalar_t>(2 * acc_t(a[i]) * acc_t(g[i]));
    });
  });
  return grad_x;
}

}  // namespace

at::Tensor forward(const at::Tensor& x_in, int64_t version) {
  check_floating(x_in, "x");
  check_cuda_built(x_in, "x");
  check_version(version, 2);
  const at::Tensor x = x_in.contiguous();
  if (x.numel() == 0) return at::empty_like(x);
  if (x.is_cpu() && version == 2) return forward_v2_cpu(x);
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
  if (x.is_cpu() && version == 2) return backward_v2_cpu(grad_y, x);
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

// Lesson 04: the kernels that torch.library's ops course::square and course::square_backward run (version 2,
// the course's, on the CPU and the GPU). The registration itself is lesson 04's first exercise
// (kernels/exercises/square_library.h, compiled by square.library.cpp); the fake kernels and the backward
// formula are its Python exercises (square_fake.py, square_autograd.py).
at::Tensor square_kernel(const at::Tensor& x) { return forward(x, 2); }
at::Tensor square_backward_kernel(const at::Tensor& grad_y, const at::Tensor& x) {
  return backward(grad_y, x, 2);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "y = x * x as a C++ autograd Function (lesson 02's exercise): version 1 is yours, 2 the course's";
  m.def("forward", &forward, "y = x * x", py::arg("x"), py::arg("version") = kDefaultVersion);
  m.def("backward", &backward, "grad_x = 2 * x * grad_y", py::arg("grad_y"), py::arg("x"),
        py::arg("version") = kDefaultVersion);
  m.def("square", &square, "differentiable x * x (SquareFunction)", py::arg("x"),
        py::arg("version") = kDefaultVersion);
}
