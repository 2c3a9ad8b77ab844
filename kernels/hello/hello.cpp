// kernels/hello/hello.cpp: the PyTorch side of hello.cu: forward(x) = x + 1 for float32 tensors, on the
// CPU or (in a CUDA build) on the GPU, with the input checks every op in the course has.
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include "common/checks.h"

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
void add_one_cuda(const float* x, float* y, int64_t n, cudaStream_t stream);
#endif

at::Tensor forward(const at::Tensor& x_in) {
  TORCH_CHECK_VALUE(x_in.defined(), "x must be a tensor, got None");
  TORCH_CHECK_TYPE(x_in.scalar_type() == at::kFloat, "x must be float32, got ", x_in.scalar_type());
  check_cuda_built(x_in, "x");
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty_like(x);
  if (x.numel() == 0) return y;
  if (x.is_cpu()) {
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = xp[i] + 1.0f;
    return y;
  }
#ifdef WITH_CUDA
  const c10::cuda::CUDAGuard guard(x.device());
  add_one_cuda(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), c10::cuda::getCurrentCUDAStream());
#endif
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "y = x + 1 (float32)", py::arg("x")); }
