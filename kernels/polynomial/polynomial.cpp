// kernels/polynomial/polynomial.cpp: the PyTorch side of y = a*x^3 + b*x^2 + c*x + d (lesson 01).
//
//   forward(x, coeffs, version=2) -> y
//   forward_out(x, coeffs, out, version=2) -> out: forward into a given contiguous tensor of x's shape
//   backward(grad_y, x, coeffs, need_coeffs_grad=True, version=2) -> [grad_x, grad_coeffs or None]
//   polynomial(x, coeffs) -> y, differentiable: forward/backward v2 in a C++ torch::autograd::Function
//     (lesson 02 explains it): the same math as lesson 01's Python autograd.Function with less
//     per-call CPU time, which is what small tensors are limited by.
//
// coeffs = [a, b, c, d], any floating dtype, on x's device. The math runs in float32 (float64 for
// float64 x), so grad_coeffs comes back in that dtype. This file checks the inputs, allocates the
// outputs, picks the dtype (AT_DISPATCH) and calls the CPU loops below or the CUDA launchers of
// polynomial.cu on PyTorch's current stream. Forward version 1 is the learner's: exercise 1,
// kernels/exercises/polynomial_forward.cuh (CPU loop, CUDA kernel and launcher), compiled by the torch-free
// polynomial.exercises.cpp (CPU, declared in polynomial_cpu.h) and .cu (declared in polynomial.h). This file
// never includes the exercise, so editing it rebuilds in seconds. Backward version 1 (grad_x only) is given:
// the loop below and polynomial.cu's kernel.
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "common/library.h"
#include "polynomial_cpu.h"

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "polynomial.h"
#endif

namespace {

constexpr int64_t kGrain = 32768;  // elements per CPU task

template <typename T, typename acc_t>
void forward_v2_cpu(const T* x, const acc_t* c, T* y, int64_t n) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const acc_t v = static_cast<acc_t>(x[i]);
      y[i] = static_cast<T>(((c[0] * v + c[1]) * v + c[2]) * v + c[3]);
    }
  });
}

// grad_x, and the coefficient sums per fixed chunk of kGrain elements, added in chunk order at the
// end: the same result whatever the number of threads.
template <typename T, typename acc_t>
void backward_v2_cpu(const T* gy, const T* x, const acc_t* c, T* gx, acc_t* gc, int64_t n) {
  const int64_t chunks = (n + kGrain - 1) / kGrain;
  std::vector<acc_t> partial(gc ? chunks * 4 : 0, acc_t(0));
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t ch = cb; ch < ce; ++ch) {
      acc_t s[4] = {0, 0, 0, 0};
      const int64_t end = std::min(n, (ch + 1) * kGrain);
      for (int64_t i = ch * kGrain; i < end; ++i) {
        const acc_t v = static_cast<acc_t>(x[i]), g = static_cast<acc_t>(gy[i]);
        gx[i] = static_cast<T>(g * ((3 * c[0] * v + 2 * c[1]) * v + c[2]));
        const acc_t gv = g * v;
        s[0] += gv * v * v;
        s[1] += gv * v;
        s[2] += gv;
        s[3] += g;
      }
      if (gc)
        for (int k = 0; k < 4; ++k) partial[ch * 4 + k] = s[k];
    }
  });
  if (gc) {
    for (int k = 0; k < 4; ++k) gc[k] = 0;
    for (int64_t ch = 0; ch < chunks; ++ch)
      for (int k = 0; k < 4; ++k) gc[k] += partial[ch * 4 + k];
  }
}

// Forward version 1 on the CPU is exercise 1's Part 1, written for float and double (polynomial_cpu.h): it
// writes straight into y (the self-check's guarded buffer sees any write past the end). checks.h's on_cpu
// runs it on float16 and bfloat16 through float. coeffs is already in the math dtype.
void forward_v1_cpu(const at::Tensor& x, const at::Tensor& coeffs, at::Tensor& y) {
  if (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) {
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "polynomial_forward_v1_cpu", [&] {
      poly_forward_v1_cpu(x.data_ptr<scalar_t>(), coeffs.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                          x.numel());
    });
    return;
  }
  y.copy_(on_cpu<1>(
      [&](const auto* a, auto* out, int64_t n) {
        using T = std::remove_const_t<std::remove_pointer_t<decltype(a)>>;
        poly_forward_v1_cpu(a, coeffs.data_ptr<T>(), out, n);
      },
      {x}));
}

// Backward version 1 on the CPU: grad_x only, one element at a time, for float and double (on_cpu runs it
// on float16 and bfloat16 through float), as polynomial.cu's backward v1 does one element per thread.
template <typename T>
void backward_v1_loop(const T* gy, const T* x, const T* c, T* gx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gx[i] = gy[i] * ((3 * c[0] * x[i] + 2 * c[1]) * x[i] + c[2]);
}

at::Tensor backward_v1_cpu(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& coeffs) {
  return on_cpu<2>(
      [&](const auto* g, const auto* a, auto* gx, int64_t n) {
        using T = std::remove_const_t<std::remove_pointer_t<decltype(a)>>;
        backward_v1_loop(g, a, coeffs.data_ptr<T>(), gx, n);
      },
      {grad_y, x});
}

// Checks shared by forward and backward; returns coeffs as a contiguous tensor of the math dtype.
at::Tensor checked_coeffs(const at::Tensor& x, const at::Tensor& coeffs) {
  check_floating(x, "x");
  check_cuda_built(x, "x");
  check_floating(coeffs, "coeffs");
  check_same_device(coeffs, "coeffs", x, "x");
  check_shape(coeffs, "coeffs", {4});
  return coeffs.to(acc_dtype(x)).contiguous();
}

// y = the polynomial of x, into y: x contiguous, coeffs checked (checked_coeffs), y contiguous, of x's
// shape, dtype and device.
void forward_into(const at::Tensor& x, const at::Tensor& coeffs, at::Tensor& y, int64_t version) {
  const int64_t n = x.numel();
  if (n == 0) return;  // a launch of 0 blocks is an error
  if (x.is_cpu() && version == 1) return forward_v1_cpu(x, coeffs, y);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "polynomial_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (x.is_cpu()) {
      forward_v2_cpu(x.data_ptr<scalar_t>(), coeffs.data_ptr<acc_t>(), y.data_ptr<scalar_t>(), n);
      return;
    }
#ifdef WITH_CUDA
    const c10::cuda::CUDAGuard guard(x.device());
    const auto stream = c10::cuda::getCurrentCUDAStream().stream();
    auto launch = version == 1 ? poly_forward_v1<typename CudaType<scalar_t>::type>
                               : poly_forward_v2<typename CudaType<scalar_t>::type>;
    launch(cuda_ptr<scalar_t>(x), coeffs.data_ptr<acc_t>(), cuda_ptr<scalar_t>(y), n, stream);
#endif
  });
}

}  // namespace

at::Tensor forward(const at::Tensor& x_in, const at::Tensor& coeffs_in, int64_t version) {
  check_version(version, 2);
  const at::Tensor coeffs = checked_coeffs(x_in, coeffs_in);
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty_like(x);
  forward_into(x, coeffs, y, version);
  return y;
}

// forward into a tensor the caller allocated: the self-check of exercise 1 passes a view inside a larger
// buffer and checks that the bytes around it stay as they were (a kernel that writes past n shows there).
at::Tensor forward_out(const at::Tensor& x_in, const at::Tensor& coeffs_in, at::Tensor out, int64_t version) {
  check_version(version, 2);
  const at::Tensor coeffs = checked_coeffs(x_in, coeffs_in);
  check_defined(out, "out");
  check_same_device(out, "out", x_in, "x");
  check_same_dtype(out, "out", x_in, "x");
  check_shape(out, "out", x_in.sizes());
  TORCH_CHECK_VALUE(out.is_contiguous(), "out must be contiguous");
  forward_into(x_in.contiguous(), coeffs, out, version);
  return out;
}

std::vector<at::Tensor> backward(const at::Tensor& grad_y_in, const at::Tensor& x_in,
                                 const at::Tensor& coeffs_in, bool need_coeffs_grad, int64_t version) {
  check_version(version, 2);
  const at::Tensor coeffs = checked_coeffs(x_in, coeffs_in);
  check_floating(grad_y_in, "grad_y");
  check_same_device(grad_y_in, "grad_y", x_in, "x");
  check_same_dtype(grad_y_in, "grad_y", x_in, "x");
  check_shape(grad_y_in, "grad_y", x_in.sizes());
  TORCH_CHECK_VALUE(!(version == 1 && need_coeffs_grad),
                    "backward version 1 (the exercise) computes grad_x only: pass need_coeffs_grad=False");
  const at::Tensor x = x_in.contiguous(), grad_y = grad_y_in.contiguous();
  const int64_t n = x.numel();
  if (n > 0 && x.is_cpu() && version == 1) return {backward_v1_cpu(grad_y, x, coeffs), at::Tensor()};
  at::Tensor grad_x = at::empty_like(x);
  at::Tensor grad_coeffs = need_coeffs_grad ? at::empty({4}, coeffs.options()) : at::Tensor();
  if (n == 0) return {grad_x, need_coeffs_grad ? grad_coeffs.zero_() : grad_coeffs};  // a sum of nothing is 0
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "polynomial_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    acc_t* gc = need_coeffs_grad ? grad_coeffs.data_ptr<acc_t>() : nullptr;
    if (x.is_cpu()) {
      backward_v2_cpu(grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), coeffs.data_ptr<acc_t>(),
                      grad_x.data_ptr<scalar_t>(), gc, n);
      return;
    }
#ifdef WITH_CUDA
    using cuda_t = typename CudaType<scalar_t>::type;
    const c10::cuda::CUDAGuard guard(x.device());
    const auto stream = c10::cuda::getCurrentCUDAStream().stream();
    if (version == 1) {
      poly_backward_v1<cuda_t>(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(x), coeffs.data_ptr<acc_t>(),
                               cuda_ptr<scalar_t>(grad_x), n, stream);
      return;
    }
    at::Tensor partials;
    if (gc) partials = at::empty({poly_backward_v2_blocks(n), 4}, coeffs.options());
    poly_backward_v2<cuda_t>(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(x), coeffs.data_ptr<acc_t>(),
                             cuda_ptr<scalar_t>(grad_x), gc ? partials.data_ptr<acc_t>() : nullptr, gc, n,
                             stream);
#endif
  });
  return {grad_x, grad_coeffs};
}

// ---------------------------------------------------------------------------------------------------
// The op as a real PyTorch op (lesson 04): course::polynomial and its backward, with CPU and CUDA kernels
// (the functions above: one per device key, as they handle both), and an Autograd kernel, so
// torch.ops.course.polynomial is differentiable without Python. helpers/ops/polynomial.py registers
// what torch.compile needs (the fake kernels).
// ---------------------------------------------------------------------------------------------------

// The registered kernels: version 2, and the coefficient gradient always (an empty [0] tensor when not
// needed: a schema's outputs are tensors, never None).
at::Tensor polynomial_kernel(const at::Tensor& x, const at::Tensor& coeffs) { return forward(x, coeffs, 2); }

std::tuple<at::Tensor, at::Tensor> polynomial_backward_kernel(const at::Tensor& grad_y, const at::Tensor& x,
                                                              const at::Tensor& coeffs,
                                                              bool need_coeffs_grad) {
  auto out = backward(grad_y, x, coeffs, need_coeffs_grad, 2);
  at::Tensor grad_coeffs =
      need_coeffs_grad ? out[1].to(coeffs.scalar_type()) : at::empty({0}, coeffs.options());
  return {out[0], grad_coeffs};
}

// The ops as typed handles, looked up once.
const auto& poly_op() {
  static const auto handle = op<decltype(polynomial_kernel)>("polynomial");
  return handle;
}
const auto& poly_backward_op() {
  static const auto handle = op<decltype(polynomial_backward_kernel)>("polynomial_backward");
  return handle;
}

// forward and backward call the ops through the dispatcher, below the Autograd key, rather than the
// functions above: under torch.compile the tensors are fake, and the dispatcher sends them to the fake
// kernels instead of ours.
class PolynomialFunction : public torch::autograd::Function<PolynomialFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& coeffs) {
    ctx->save_for_backward({x, coeffs});
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return poly_op().call(x, coeffs);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool need_coeffs = ctx->needs_input_grad(1);
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [grad_x, grad_coeffs] = poly_backward_op().call(grads[0], saved[0], saved[1], need_coeffs);
    return once_differentiable(
        "polynomial",
        {ctx->needs_input_grad(0) ? grad_x : at::Tensor(), need_coeffs ? grad_coeffs : at::Tensor()}, grads);
  }
};

// The devices are checked here, before the dispatcher picks the next kernel: it picks by every tensor's
// device, so a CPU x with a "meta" coeffs would go to the meta (fake) kernel, not to ours that says what is
// wrong.
at::Tensor polynomial_autograd(const at::Tensor& x, const at::Tensor& coeffs) {
  check_defined(x, "x");
  check_defined(coeffs, "coeffs");
  check_same_device(coeffs, "coeffs", x, "x");
  return PolynomialFunction::apply(x, coeffs);
}

COURSE_LIBRARY(m) {
  define(m, "polynomial(Tensor x, Tensor coeffs) -> Tensor");
  define(m,
         "polynomial_backward(Tensor grad_y, Tensor x, Tensor coeffs, bool need_coeffs_grad) -> (Tensor, "
         "Tensor)");
}
// CPU and CUDA take the same kernels; the other ops write these two blocks once, as COURSE_IMPL_CPU_CUDA.
TORCH_LIBRARY_IMPL(course, CPU, m) {
  m.impl("polynomial", &polynomial_kernel);
  m.impl("polynomial_backward", &polynomial_backward_kernel);
}
#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(course, CUDA, m) {
  m.impl("polynomial", &polynomial_kernel);
  m.impl("polynomial_backward", &polynomial_backward_kernel);
}
#endif
TORCH_LIBRARY_IMPL(course, Autograd, m) { m.impl("polynomial", &polynomial_autograd); }

// Under torch.autocast("cuda") the op runs in float32, as the written-out polynomial does (its x**3 is an
// aten::pow, on autocast's float32 list for CUDA: powers of half values lose precision fast). Each
// argument is cast as ATen's own autocast wrappers do (cached_cast: only float16/bfloat16 CUDA tensors),
// and the op called again with autocast off. On the CPU autocast leaves pow alone, and so this op.
at::Tensor polynomial_autocast_cuda(const at::Tensor& x, const at::Tensor& coeffs) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  return poly_op().call(at::autocast::cached_cast(at::kFloat, x, c10::DeviceType::CUDA),
                        at::autocast::cached_cast(at::kFloat, coeffs, c10::DeviceType::CUDA));
}
TORCH_LIBRARY_IMPL(course, AutocastCUDA, m) { m.impl("polynomial", &polynomial_autocast_cuda); }

// Lessons 01-03 call the op through this pybind11 module: polynomial() is the same differentiable op.
at::Tensor polynomial(const at::Tensor& x, const at::Tensor& coeffs) { return poly_op().call(x, coeffs); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "y = a*x^3 + b*x^2 + c*x + d with coeffs = [a, b, c, d] (lesson 01)";
  m.def("forward", &forward, "y = a*x^3 + b*x^2 + c*x + d", py::arg("x"), py::arg("coeffs"),
        py::arg("version") = 2);
  m.def("forward_out", &forward_out, "forward into out (contiguous, x's shape, dtype and device)",
        py::arg("x"), py::arg("coeffs"), py::arg("out"), py::arg("version") = 2);
  m.def("backward", &backward, "[grad_x, grad_coeffs (None unless need_coeffs_grad)]", py::arg("grad_y"),
        py::arg("x"), py::arg("coeffs"), py::arg("need_coeffs_grad") = true, py::arg("version") = 2);
  m.def("polynomial", &polynomial, "differentiable forward (C++ autograd Function, versions 2)", py::arg("x"),
        py::arg("coeffs"));
}
