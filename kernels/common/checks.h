// kernels/common/checks.h: input checks for the PyTorch side (.cpp files), so that bad input gets an error
// naming the argument and what was expected instead of a crash or silent garbage.
//
//   check_floating(t, "x")          defined, and float32/float64/float16/bfloat16   (TypeError)
//   check_same_device(t, "c", x, "x")                                               (RuntimeError)
//   check_same_dtype(t, "c", x, "x")                                                (TypeError)
//   check_shape(t, "c", {4})                                                        (ValueError)
//   on_cpu<K>(f, {x, ...})         an exercise's float/double CPU loop on any of the 4 dtypes
//   check_version(v, 3)             an op's `version` argument is 1..3                 (ValueError)
//   check_choice(s, "kernel", names) an enum value by its name in {value, "name"} pairs (ValueError)
//   shape_str(t.sizes())            "[3, 4]", for messages (see below: no ostream for numbers)
//   acc_dtype(t)                    float64 for float64 tensors, else float32: the math type
//   CudaType<scalar_t>::type        at::Half -> __half, at::BFloat16 -> __nv_bfloat16 (WITH_CUDA only)
//   check_like(g, "grad_y", x, "x") defined, on x's device, of x's shape                (ValueError)
//   check_defined(t, "bias")        not None                                           (ValueError)
//   check_not_0d(t, "x")            at least one dimension                             (ValueError)
//   OnDevice on(x)                  x's device guard, and PyTorch's stream there: on.stream (WITH_CUDA)
#pragma once

// The torch headers the glue needs, not <torch/extension.h>: that one adds torch's whole C++ frontend
// (torch/all.h: nn, optim, data loaders, serialization), which no op here uses and which costs each .cpp
// ~1.5 s more to load, precompiled or not (helpers/loader/toolchain.py's PCH_HEADER precompiles the same
// list). Nor pybind11: only the file that binds the Python module (PYBIND11_MODULE) includes
// <torch/csrc/utils/pybind.h>, since every file that includes it compiles pybind11's inline functions.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

inline void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.defined(), name, " must be a tensor, got None");
  const auto s = t.scalar_type();
  TORCH_CHECK_TYPE(s == at::kFloat || s == at::kDouble || s == at::kHalf || s == at::kBFloat16, name,
                   " must be float32, float64, float16 or bfloat16, got ", s);
}

inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& ref,
                              const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), name, " must be on the same device as ", ref_name, " (",
              ref.device(), "), got ", t.device());
}

inline void check_same_dtype(const at::Tensor& t, const char* name, const at::Tensor& ref,
                             const char* ref_name) {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), name, " must have the dtype of ", ref_name, " (",
                   ref.scalar_type(), "), got ", t.scalar_type());
}

// "[3, 4]". Numbers in messages go through std::to_string, not std::ostream: on some toolchains an
// extension's ostream number formatting disagrees with the libstdc++ loaded at run time and crashes
// (seen with g++ 13.3 on the GPU test machine), while string concatenation is safe everywhere.
inline std::string shape_str(at::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

inline void check_shape(const at::Tensor& t, const char* name, at::IntArrayRef shape) {
  TORCH_CHECK_VALUE(t.sizes() == shape, name, " must have shape ", shape_str(shape), ", got ",
                    shape_str(t.sizes()));
}

inline void check_version(int64_t version, int64_t max_version) {
  TORCH_CHECK_VALUE(version >= 1 && version <= max_version, "version must be between 1 and ",
                    std::to_string(max_version), ", got ", std::to_string(version));
}

// The value named `value` among `choices` ({value, "name"} pairs, e.g. an enum class's values named for
// Python as in layernorm_choices.h); a bad name gets the list of the allowed ones.
template <typename E, size_t K>
E check_choice(const std::string& value, const char* name, const std::pair<E, const char*> (&choices)[K]) {
  std::string allowed;
  for (const auto& [choice, choice_name] : choices) {
    if (value == choice_name) return choice;
    allowed += std::string(allowed.empty() ? "\"" : ", \"") + choice_name + "\"";
  }
  TORCH_CHECK_VALUE(false, name, " must be one of ", allowed, ", got \"", value, "\"");
  return choices[0].first;
}

inline at::ScalarType acc_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// An exercise's Part 1 loop (written for float and double, torch-free) on CPU tensors of any of the 4 dtypes:
// float and double as they are, float16 and bfloat16 converted to float and the result converted back (their
// math is in float anyway, so the bits are those of computing from the half values and rounding once).
// `f(inputs..., output, n)` with K = 1 or 2 elementwise inputs; the output is shaped like the first.
template <int K, typename F>
at::Tensor on_cpu(F f, std::initializer_list<at::Tensor> inputs) {
  const at::ScalarType type = inputs.begin()->scalar_type();
  std::vector<at::Tensor> in;
  for (const auto& t : inputs) in.push_back(t.to(acc_dtype(t)).contiguous());
  at::Tensor out = at::empty_like(in[0]);
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "on_cpu", [&] {
    if constexpr (K == 1)
      f(in[0].data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), out.numel());
    else
      f(in[0].data_ptr<scalar_t>(), in[1].data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), out.numel());
  });
  return out.to(type);
}

inline void check_cuda_built(const at::Tensor& t, const char* name) {
#ifndef WITH_CUDA
  TORCH_CHECK(!t.is_cuda(), name, " is a CUDA tensor, but this module was built without CUDA (CPU mode)");
#endif
  TORCH_CHECK(t.is_cpu() || t.is_cuda(), name, " must be a CPU or CUDA tensor, got ", t.device());
}

#ifdef WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
template <typename T>
struct CudaType {
  using type = T;
};
template <>
struct CudaType<at::Half> {
  using type = __half;
};
template <>
struct CudaType<at::BFloat16> {
  using type = __nv_bfloat16;
};
// The same bytes seen as the CUDA type, for passing a tensor's data to a launcher.
template <typename scalar_t>
auto cuda_ptr(const at::Tensor& t) {
  return reinterpret_cast<typename CudaType<scalar_t>::type*>(t.data_ptr<scalar_t>());
}
#endif

// t has the shape of `like` and is on its device (a gradient and the tensor it belongs to), defined.
inline void check_like(const at::Tensor& t, const char* name, const at::Tensor& like, const char* like_name) {
  TORCH_CHECK_VALUE(t.defined(), name, " must be a tensor, got None");
  check_same_device(t, name, like, like_name);
  check_shape(t, name, like.sizes());
}

// A tensor argument that may not be None ("bias must be a tensor, got None").
inline void check_defined(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.defined(), name, " must be a tensor, got None");
}

// At least one dimension, for ops over the last one ("x must have at least one dimension, got a 0-d tensor").
inline void check_not_0d(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() >= 1, name, " must have at least one dimension, got a 0-d tensor");
}

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
// OnDevice on(x): the device guard of x's GPU, and PyTorch's current stream there (on.stream) for launches.
// Without it, a launch goes to the *current* GPU, whatever GPU x is on. Built with -DCOURSE_NO_DEVICE_GUARD
// (only helpers/multigpu.py's demonstration does), it makes that mistake on purpose: no guard, and the
// current device's stream.
#ifndef COURSE_NO_DEVICE_GUARD
struct OnDevice {
  c10::cuda::CUDAGuard guard;
  cudaStream_t stream;
  explicit OnDevice(const at::Tensor& t)
      : guard(t.device()), stream(c10::cuda::getCurrentCUDAStream(t.device().index()).stream()) {}
};
#else
struct OnDevice {
  cudaStream_t stream;
  explicit OnDevice(const at::Tensor&) : stream(c10::cuda::getCurrentCUDAStream().stream()) {}
};
#endif
#endif
