// kernels/debugging/debugging.cpp: the PyTorch side of lesson 07: its two exercises (row_sum_into,
// scale_shift_into: CPU and CUDA) and the broken kernels of debugging.cu (CUDA only), bound as a plain
// Python module (loader.load("debugging")). Teaching material, not an op of the course: no torch.library
// registration. The exercises write into an output the caller allocates, so that the self-check can put it
// inside a guard buffer and see a write past its end.
#include "debugging.h"

#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include "common/checks.h"

namespace {
void check_float_contiguous(const at::Tensor& t, const char* name) {
  check_defined(t, name);
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.is_contiguous(), name, " must be contiguous (call .contiguous())");
  check_cuda_built(t, name);
}

// The broken kernels are CUDA only: a CPU tensor gets this error, not a crash.
void check_gpu(const at::Tensor& t, const char* name) {
  check_defined(t, name);
  TORCH_CHECK_VALUE(t.is_cuda(), name,
                    " must be a CUDA tensor: the kernels of debugging.cu run on a GPU only, got ",
                    t.device());
  check_cuda_built(t, name);
}

// x and y of one elementwise broken kernel: float32, contiguous, y shaped like x, on a GPU.
void check_gpu_pair(const at::Tensor& x, const at::Tensor& y) {
  check_gpu(x, "x");
  check_float_contiguous(x, "x");
  check_float_contiguous(y, "y");
  check_like(y, "y", x, "x");
}
}  // namespace

void row_sum_into(const at::Tensor& x, at::Tensor& out) {
  check_float_contiguous(x, "x");
  TORCH_CHECK_VALUE(x.dim() == 2, "x must be 2-D [rows, cols], got ", shape_str(x.sizes()));
  check_float_contiguous(out, "out");
  check_same_device(out, "out", x, "x");
  check_shape(out, "out", {x.size(0)});
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  if (cols == 0) {
    out.zero_();
    return;
  }
  if (x.is_cpu()) {
    row_sum_cpu_part(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return;
  }
#ifdef WITH_CUDA
  TORCH_CHECK_VALUE(rows < (int64_t(1) << 31), "x has ", std::to_string(rows),
                    " rows; the grid takes < 2^31");
  const OnDevice on(x);
  row_sum(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols, on.stream);
#endif
}

void scale_shift_into(const at::Tensor& x, at::Tensor& y, double a, double b) {
  check_float_contiguous(x, "x");
  check_float_contiguous(y, "y");
  check_like(y, "y", x, "x");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.is_cpu()) {
    scale_shift_cpu_part(x.data_ptr<float>(), y.data_ptr<float>(), n, float(a), float(b));
    return;
  }
#ifdef WITH_CUDA
  for (const at::Tensor* t : {&x, static_cast<const at::Tensor*>(&y)}) {
    TORCH_CHECK_VALUE(
        reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0, t == &x ? "x" : "y",
        " must start on a 16-byte boundary (the kernel loads float4s); a view at an offset may not: "
        "pass .clone()");
  }
  const OnDevice on(x);
  scale_shift(x.data_ptr<float>(), y.data_ptr<float>(), n, float(a), float(b), on.stream);
#endif
}

#ifdef WITH_CUDA
void double_tail_into(const at::Tensor& x, at::Tensor& y, bool fixed) {
  check_gpu_pair(x, y);
  if (x.numel() == 0) return;
  const OnDevice on(x);
  double_tail(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), fixed, on.stream);
}

void block_sum_into(const at::Tensor& x, at::Tensor& out, int64_t bug) {
  check_gpu(x, "x");
  check_float_contiguous(x, "x");
  TORCH_CHECK_VALUE(x.dim() == 2 && x.size(0) > 0 && x.size(1) > 0, "x must be 2-D and not empty, got ",
                    shape_str(x.sizes()));
  check_float_contiguous(out, "out");
  check_same_device(out, "out", x, "x");
  check_shape(out, "out", {x.size(0)});
  TORCH_CHECK_VALUE(
      bug == 2 || bug == 3 || bug == 8,
      "bug must be 2 (no __syncthreads), 3 (uninitialized shared memory) or 8 (a barrier in a branch), "
      "got ",
      std::to_string(bug));
  const OnDevice on(x);
  block_sum_broken(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1), int(bug), on.stream);
}

void double_threads_into(const at::Tensor& x, at::Tensor& y, int64_t threads, bool checked) {
  check_gpu_pair(x, y);
  TORCH_CHECK_VALUE(threads > 0 && threads <= (1 << 16), "threads must be in 1..65536, got ",
                    std::to_string(threads));
  if (x.numel() == 0) return;
  const OnDevice on(x);
  double_threads(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), int(threads), checked, on.stream);
}

void double_stream_into(const at::Tensor& x, at::Tensor& y, bool fixed) {
  check_gpu_pair(x, y);
  if (x.numel() == 0) return;
  const OnDevice on(x);
  double_stream(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), fixed, on.stream);
}

void add_one_bytes_(at::Tensor& x, bool fixed) {
  check_gpu(x, "x");
  TORCH_CHECK_TYPE(x.scalar_type() == at::kByte, "x must be uint8, got ", x.scalar_type());
  TORCH_CHECK_VALUE(x.is_contiguous(), "x must be contiguous");
  if (x.numel() == 0) return;
  const OnDevice on(x);
  add_one_bytes(x.data_ptr<uint8_t>(), x.numel(), fixed, on.stream);
}

at::Tensor gather(const at::Tensor& x, const at::Tensor& index) {
  check_gpu(x, "x");
  check_float_contiguous(x, "x");
  check_gpu(index, "index");
  TORCH_CHECK_TYPE(index.scalar_type() == at::kLong, "index must be int64, got ", index.scalar_type());
  check_same_device(index, "index", x, "x");
  const at::Tensor idx = index.contiguous();
  at::Tensor out = at::empty(idx.sizes(), x.options());
  if (idx.numel() == 0) return out;
  const OnDevice on(x);
  gather_checked(x.data_ptr<float>(), idx.data_ptr<int64_t>(), out.data_ptr<float>(), idx.numel(), x.numel(),
                 on.stream);
  return out;
}

// y = 2x by adding into the output. Bug 7 (fixed=false): the output comes from at::empty, memory nobody
// wrote.
at::Tensor double_by_adding(const at::Tensor& x, bool fixed) {
  check_gpu(x, "x");
  check_float_contiguous(x, "x");
  at::Tensor y = fixed ? at::zeros_like(x) : at::empty_like(x);
  if (x.numel() == 0) return y;
  const OnDevice on(x);
  accumulate(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), on.stream);
  return y;
}

at::Tensor double_printf_(const at::Tensor& x) {
  check_gpu(x, "x");
  check_float_contiguous(x, "x");
  at::Tensor y = at::empty_like(x);
  if (x.numel() == 0) return y;
  const OnDevice on(x);
  double_printf(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), on.stream);
  return y;
}
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("row_sum_into", &row_sum_into, "exercise 1: out[r] = sum of row r of x (float32, 2-D)", py::arg("x"),
        py::arg("out"));
  m.def("scale_shift_into", &scale_shift_into, "exercise 2: y = a * x + b (float32)", py::arg("x"),
        py::arg("y"), py::arg("a"), py::arg("b"));
#ifdef WITH_CUDA
  m.def("double_tail_into", &double_tail_into, "bug 1 (fixed=False): y = 2x with no bounds check",
        py::arg("x"), py::arg("y"), py::arg("fixed"));
  m.def(
      "block_sum_into", &block_sum_into,
      "bugs 2, 3 and 8: a block reduction without a barrier / with unset slots / with a barrier in a branch",
      py::arg("x"), py::arg("out"), py::arg("bug"));
  m.def("double_by_adding", &double_by_adding, "bug 7 (fixed=False): y += 2x into memory nobody wrote",
        py::arg("x"), py::arg("fixed"));
  m.def("double_threads_into", &double_threads_into, "bug 4: y = 2x launched with `threads` per block",
        py::arg("x"), py::arg("y"), py::arg("threads"), py::arg("checked"));
  m.def("double_stream_into", &double_stream_into, "bug 5 (fixed=False): y = 2x on the legacy default stream",
        py::arg("x"), py::arg("y"), py::arg("fixed"));
  m.def("add_one_bytes_", &add_one_bytes_, "bug 6 (fixed=False): x += 1 (uint8) with a 32-bit index",
        py::arg("x"), py::arg("fixed"));
  m.def("gather", &gather, "out[i] = x[index[i]], with a device-side assert on the index", py::arg("x"),
        py::arg("index"));
  m.def("double_printf", &double_printf_, "y = 2x, thread 0 of each block printing", py::arg("x"));
#endif
}
