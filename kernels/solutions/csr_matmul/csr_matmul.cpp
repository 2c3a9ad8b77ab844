// csr_matmul.cpp: the PyTorch side of course::csr_matmul (lesson 09's practice set: the answer). Y = A @ B
// for a sparse A of M rows and n_cols_A = K columns in CSR (crow_indices, col_indices, values) and a dense B,
// and the gradient for B (A is data: values get none).
//
//   course::csr_matmul(crow_indices, col_indices, values, dense, n_cols_A, variant="auto")
//       dense [K, N] -> Y [M, N]; dense [K] -> Y [M]
//   course::csr_matmul_backward(crow_indices, col_indices, values, grad_y, k, variant="auto")
//       grad_y [M, N] -> grad_dense = A^T @ grad_y [k, N]; grad_y [M] -> [k]
//
// This file checks the arguments (an error names the argument) and A's indices: on the CPU before the loops
// read through them; on the GPU the kernels set bits in a flag that is read once, after them (the call waits
// for the GPU there, as .item() does). It makes the tensors contiguous, allocates the output and the scratch,
// and runs the CPU loops (csr_matmul.cpu.cpp, over threads) or the CUDA launchers (csr_matmul.cu) on
// PyTorch's current stream; then registers both functions as the ops' CPU and CUDA kernels. csr_matmul.py
// adds the fake kernels and the autograd formula.
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: makes the library importable as a Python module

#include <algorithm>
#include <string>
#include <vector>

#include "common/checks.h"
#include "common/library.h"
#include "csr_matmul_cpu.h"
#include "csr_matmul_types.h"
#ifdef WITH_CUDA
#include "csr_matmul.h"
#endif

namespace {

constexpr int64_t kGrain =
    32768;  // multiply-adds per CPU task: smaller tasks cost more to hand out than they take

// Rows per CPU task, for rows of about nnz / m nonzeros times n columns each.
int64_t grain_rows(int64_t m, int64_t nnz, int64_t n) {
  const int64_t per_row = (nnz / std::max<int64_t>(1, m) + 1) * std::max<int64_t>(1, n);
  return std::max<int64_t>(1, kGrain / per_row);
}

void check_index(const at::Tensor& t, const char* name) {
  check_defined(t, name);
  check_cuda_built(t, name);
  TORCH_CHECK_TYPE(t.scalar_type() == at::kLong, name, " must be int64 (torch.long), got ", t.scalar_type(),
                   " (convert with .long())");
  TORCH_CHECK_VALUE(t.dim() == 1, name, " must be 1-D, got shape ", shape_str(t.sizes()));
}

// What every call checks of A: the three tensors, their dtypes, shapes and device. Returns M.
int64_t check_csr(const at::Tensor& crow, const at::Tensor& col, const at::Tensor& values) {
  check_index(crow, "crow_indices");
  TORCH_CHECK_VALUE(crow.numel() >= 1,
                    "crow_indices must hold M + 1 values (row i's nonzeros are crow_indices[i] .. "
                    "crow_indices[i+1] - 1), got an empty tensor");
  check_index(col, "col_indices");
  check_same_device(col, "col_indices", crow, "crow_indices");
  check_defined(values, "values");
  const auto s = values.scalar_type();
  TORCH_CHECK_TYPE(
      s == at::kFloat || s == at::kDouble, "values must be float32 or float64, got ", s,
      " (float16 and bfloat16 are not supported: a long row's sum and backward's atomic adds would "
      "round to 11 or 8 bits at every step)");
  TORCH_CHECK_VALUE(values.dim() == 1, "values must be 1-D, got shape ", shape_str(values.sizes()));
  check_same_device(values, "values", crow, "crow_indices");
  TORCH_CHECK_VALUE(values.numel() == col.numel(), "values must hold one value per entry of col_indices (",
                    std::to_string(col.numel()), "), got ", std::to_string(values.numel()));
  return crow.numel() - 1;
}

// dense (or grad_y): values' device and dtype, 1-D [rows] or 2-D [rows, N].
void check_dense(const at::Tensor& t, const char* name, const at::Tensor& values, int64_t rows,
                 const char* rows_name) {
  check_defined(t, name);
  check_same_device(t, name, values, "values");
  check_same_dtype(t, name, values, "values");
  TORCH_CHECK_VALUE(t.dim() == 1 || t.dim() == 2, name, " must be 1-D [", rows_name, "] or 2-D [", rows_name,
                    ", N], got shape ", shape_str(t.sizes()));
  TORCH_CHECK_VALUE(t.size(0) == rows, name, " must have ", rows_name, " = ", std::to_string(rows),
                    " rows, got shape ", shape_str(t.sizes()));
}

// The error for the bad indices in `flags` (csr_matmul_types.h's bits); `where` says which index, if known.
void report_bad_indices(int flags, int64_t k, int64_t nnz, const std::string& where) {
  TORCH_CHECK_VALUE(!(flags & kBadCrowStart), "crow_indices must start at 0", where);
  TORCH_CHECK_VALUE(
      !(flags & kBadCrowOrder),
      "crow_indices must never decrease (row i's nonzeros are crow_indices[i] .. crow_indices[i+1] "
      "- 1)",
      where);
  TORCH_CHECK_VALUE(!(flags & kBadCrowEnd),
                    "crow_indices must end at nnz = col_indices.numel() = ", std::to_string(nnz), where);
  TORCH_CHECK_VALUE(!(flags & kBadCol), "col_indices must be in [0, ", std::to_string(k),
                    ") (n_cols_A, the columns of A)", where);
}

// A's indices on the CPU, before a loop reads through them: the first problem found, with its position.
void check_indices_cpu(const at::Tensor& crow, const at::Tensor& col, int64_t k) {
  const int64_t* c = crow.data_ptr<int64_t>();
  const int64_t* j = col.data_ptr<int64_t>();
  const int64_t m = crow.numel() - 1, nnz = col.numel();
  const auto at = [](const char* name, int64_t i, int64_t v) {
    return std::string(": ") + name + "[" + std::to_string(i) + "] = " + std::to_string(v);
  };
  if (c[0] != 0) report_bad_indices(kBadCrowStart, k, nnz, at("crow_indices", 0, c[0]));
  for (int64_t i = 0; i < m; ++i)
    if (c[i + 1] < c[i])
      report_bad_indices(kBadCrowOrder, k, nnz,
                         at("crow_indices", i + 1, c[i + 1]) + " < " + std::to_string(c[i]));
  if (c[m] != nnz) report_bad_indices(kBadCrowEnd, k, nnz, at("crow_indices", m, c[m]));
  for (int64_t i = 0; i < nnz; ++i)
    if (j[i] < 0 || j[i] >= k) report_bad_indices(kBadCol, k, nnz, at("col_indices", i, j[i]));
}

#ifdef WITH_CUDA
// After the kernels: the flag they set, read once (not while a CUDA graph is being captured: nothing may wait
// then, and the kernels have only skipped what was bad).
void check_flag_cuda(const at::Tensor& bad, int64_t k, int64_t nnz, cudaStream_t stream) {
  const int flags = csr_read_flag_cuda(bad.data_ptr<int>(), stream);
  if (flags > 0) report_bad_indices(flags, k, nnz, " (found on the GPU)");
}
#endif

// [rows] for a 1-D operand, [rows, N] for a 2-D one.
std::vector<int64_t> rows_like(const at::Tensor& t, int64_t rows) {
  return t.dim() == 1 ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, t.size(1)};
}

}  // namespace

at::Tensor csr_matmul_kernel(const at::Tensor& crow_in, const at::Tensor& col_in, const at::Tensor& values_in,
                             const at::Tensor& dense_in, int64_t n_cols_A, const std::string& kernel_name) {
  const int64_t m = check_csr(crow_in, col_in, values_in);
  TORCH_CHECK_VALUE(n_cols_A >= 0, "n_cols_A (K, the columns of A) must be >= 0, got ",
                    std::to_string(n_cols_A));
  check_dense(dense_in, "dense", values_in, n_cols_A, "n_cols_A");
  [[maybe_unused]] const CsrKernel kernel = check_choice(kernel_name, "variant", kCsrKernelNames);
  const at::Tensor crow = crow_in.contiguous(), col = col_in.contiguous(), values = values_in.contiguous();
  const at::Tensor dense = dense_in.contiguous();
  const int64_t k = n_cols_A, nnz = col.numel(), n = dense.dim() == 1 ? 1 : dense.size(1);
  at::Tensor y = at::empty(rows_like(dense, m), dense.options());
  if (crow.is_cpu()) {
    check_indices_cpu(crow, col, k);
    if (y.numel() == 0) return y;
    AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "csr_matmul", [&] {
      at::parallel_for(0, m, grain_rows(m, nnz, n), [&](int64_t begin, int64_t end) {
        csr_rows_cpu(crow.data_ptr<int64_t>(), col.data_ptr<int64_t>(), values.data_ptr<scalar_t>(),
                     dense.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), begin, end, n);
      });
    });
    return y;
  }
#ifdef WITH_CUDA
  const OnDevice on(values);
  at::Tensor bad = at::zeros({1}, crow.options().dtype(at::kInt));
  // The product needs a row of y and a row of B to exist; with K = 0, nnz must be 0 (the check sees every
  // column).
  const bool product = y.numel() > 0 && k > 0;
  csr_check_cuda(crow.data_ptr<int64_t>(), col.data_ptr<int64_t>(), m, k, nnz, !product, bad.data_ptr<int>(),
                 on.stream);
  if (product) {
    const CsrPlan plan = csr_plan(m, nnz, kernel);
    at::Tensor part = at::empty({plan.warps + 1}, crow.options());
    at::Tensor carry = at::empty({plan.warps * n}, values.options());
    AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "csr_matmul", [&] {
      csr_matmul_cuda(crow.data_ptr<int64_t>(), col.data_ptr<int64_t>(), values.data_ptr<scalar_t>(),
                      dense.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), m, k, nnz, n, plan,
                      part.data_ptr<int64_t>(), carry.data_ptr<scalar_t>(), bad.data_ptr<int>(), on.stream);
    });
  } else {
    y.zero_();  // K = 0: every row of A is empty (or the flag says why not)
  }
  check_flag_cuda(bad, k, nnz, on.stream);
#endif
  return y;
}

at::Tensor csr_matmul_backward_kernel(const at::Tensor& crow_in, const at::Tensor& col_in,
                                      const at::Tensor& values_in, const at::Tensor& grad_y_in, int64_t k,
                                      const std::string& kernel_name) {
  const int64_t m = check_csr(crow_in, col_in, values_in);
  TORCH_CHECK_VALUE(k >= 0, "k (the columns of A, grad_dense's rows) must be >= 0, got ", std::to_string(k));
  check_dense(grad_y_in, "grad_y", values_in, m, "M = crow_indices.numel() - 1");
  [[maybe_unused]] const CsrKernel kernel = check_choice(kernel_name, "variant", kCsrKernelNames);
  const at::Tensor crow = crow_in.contiguous(), col = col_in.contiguous(), values = values_in.contiguous();
  const at::Tensor grad_y = grad_y_in.contiguous();
  const int64_t nnz = col.numel(), n = grad_y.dim() == 1 ? 1 : grad_y.size(1);
  // Zeros: the GPU's kernels add into it, and a column of A without nonzeros gets no gradient.
  at::Tensor grad_b = at::zeros(rows_like(grad_y, k), grad_y.options());
  if (crow.is_cpu()) {
    check_indices_cpu(crow, col, k);
    if (grad_b.numel() == 0) return grad_b;
    // A^T once (a counting sort: O(nnz + K), serial), then the forward's row loop on it, over threads.
    at::Tensor t_crow = at::zeros({k + 1}, crow.options());  // zeros: the counts start there
    at::Tensor t_col = at::empty({nnz}, col.options());
    AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "csr_matmul_backward", [&] {
      at::Tensor t_val = at::empty({nnz}, values.options());
      csr_transpose_cpu(crow.data_ptr<int64_t>(), col.data_ptr<int64_t>(), values.data_ptr<scalar_t>(), m, k,
                        t_crow.data_ptr<int64_t>(), t_col.data_ptr<int64_t>(), t_val.data_ptr<scalar_t>());
      at::parallel_for(0, k, grain_rows(k, nnz, n), [&](int64_t begin, int64_t end) {
        csr_rows_cpu(t_crow.data_ptr<int64_t>(), t_col.data_ptr<int64_t>(), t_val.data_ptr<scalar_t>(),
                     grad_y.data_ptr<scalar_t>(), grad_b.data_ptr<scalar_t>(), begin, end, n);
      });
    });
    return grad_b;
  }
#ifdef WITH_CUDA
  const OnDevice on(values);
  at::Tensor bad = at::zeros({1}, crow.options().dtype(at::kInt));
  const bool product = grad_b.numel() > 0 && m > 0 && nnz > 0;
  csr_check_cuda(crow.data_ptr<int64_t>(), col.data_ptr<int64_t>(), m, k, nnz, !product, bad.data_ptr<int>(),
                 on.stream);
  if (product) {
    const CsrPlan plan = csr_plan(m, nnz, kernel);
    at::Tensor part = at::empty({plan.warps + 1}, crow.options());
    AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "csr_matmul_backward", [&] {
      csr_matmul_backward_cuda(crow.data_ptr<int64_t>(), col.data_ptr<int64_t>(), values.data_ptr<scalar_t>(),
                               grad_y.data_ptr<scalar_t>(), grad_b.data_ptr<scalar_t>(), m, k, nnz, n, plan,
                               part.data_ptr<int64_t>(), bad.data_ptr<int>(), on.stream);
    });
  }
  check_flag_cuda(bad, k, nnz, on.stream);
#endif
  return grad_b;
}

// The schemas, and the functions above as the CPU and CUDA kernels (common/library.h: define() lets a rebuilt
// op load again into the same process).
COURSE_LIBRARY(m) {
  define(m,
         "csr_matmul(Tensor crow_indices, Tensor col_indices, Tensor values, Tensor dense, int n_cols_A, "
         "str variant=\"auto\") -> Tensor");
  define(m,
         "csr_matmul_backward(Tensor crow_indices, Tensor col_indices, Tensor values, Tensor grad_y, int k, "
         "str variant=\"auto\") -> Tensor");
}

COURSE_IMPL_CPU_CUDA(m) {
  m.impl("csr_matmul", &csr_matmul_kernel);
  m.impl("csr_matmul_backward", &csr_matmul_backward_kernel);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() =
      "course::csr_matmul and course::csr_matmul_backward (torch.ops.course.csr_matmul): loading registers "
      "them";
}
