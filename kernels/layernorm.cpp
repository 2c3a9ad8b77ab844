// kernels/layernorm.cpp: the PyTorch side of LayerNorm over the last dimension (lesson 03).
//
//   forward(x, weight, bias, eps=1e-5, version=3, kernel="auto") -> [y, mean, rstd]
//   backward(grad_y, x, mean, rstd, weight, version=2, kernel="auto") -> [grad_x, grad_weight, grad_bias]
//
// `kernel` names which kernel runs forward v3 or backward v2 on the GPU (kernels/layernorm_choices.h):
// forward "auto", "registers", "pipelined"; backward "auto", "two_kernels", "cooperative", "bulk_copy",
// "bulk_copy_split_barrier". "auto" runs the fastest measured on the GPU at hand; the others are there to
// be compared (benchmarks/tuning/layernorm.py, notebooks/03b_layernorm_hopper.ipynb). They change speed
// only, never results beyond rounding; on the CPU the name is checked and the CPU code runs.
//
// x has any shape [..., N]; weight and bias are [N] with x's dtype and device; mean and rstd have x's
// leading shape and are float32 (float64 for float64 x): forward saves them so backward need not
// recompute the statistics. This file checks the inputs, allocates the outputs, picks the dtype
// (AT_DISPATCH) and calls the CPU code below or the CUDA launchers of layernorm.cu on PyTorch's current
// stream. On the CPU every version runs the same two-pass code, except forward version 2 and backward
// version 1, which run the exercises' CPU parts (Part 1 of kernels/exercises/layernorm_warp_reduce.cuh and
// layernorm_backward_row.cuh, compiled in layernorm.exercises.cpp and declared in layernorm_cpu.h).
#include <ATen/Parallel.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "checks.h"
#include "layernorm_choices.h"
#include "layernorm_cpu.h"

#ifdef WITH_CUDA
#include "layernorm.h"
#endif

namespace {

// Two passes over the row: the mean, then the mean of squared deviations (see the exercise header). Each
// sum uses 8 independent accumulators (the compiler keeps them in one SIMD register) over blocks of 512
// values, and then adds the blocks: faster than one running sum, and the rounding error
// grows like 64 + n/512 rather than n, which matters for rows of 65536 floats or with a large mean.
template <typename acc_t, typename F>
acc_t blocked_sum(int64_t n, F&& value) {
  acc_t total = 0;
  for (int64_t j0 = 0; j0 < n; j0 += 512) {
    const int64_t end = std::min(n, j0 + 512);
    acc_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = j0;
    for (; j + 8 <= end; j += 8)
      for (int k = 0; k < 8; ++k) lanes[k] += value(j + k);
    for (; j < end; ++j) lanes[0] += value(j);
    for (int k = 0; k < 8; ++k) total += lanes[k];
  }
  return total;
}

template <typename T, typename acc_t>
void row_stats(const T* x, int64_t n, acc_t eps, acc_t* mean, acc_t* rstd) {
  const acc_t mu = blocked_sum<acc_t>(n, [&](int64_t j) { return static_cast<acc_t>(x[j]); }) / n;
  const acc_t sq = blocked_sum<acc_t>(n, [&](int64_t j) {
    const acc_t d = static_cast<acc_t>(x[j]) - mu;
    return d * d;
  });
  *mean = mu;
  *rstd = acc_t(1) / std::sqrt(sq / n + eps);
}

// The element-wise loops take __restrict__ pointers: told that the output does not alias the inputs, the
// compiler vectorizes them.
template <typename T, typename acc_t>
void normalize_row(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, acc_t mu,
                   acc_t rs, T* __restrict__ y, int64_t N) {
  for (int64_t j = 0; j < N; ++j)
    y[j] = static_cast<T>((static_cast<acc_t>(x[j]) - mu) * rs * static_cast<acc_t>(w[j]) +
                          static_cast<acc_t>(b[j]));
}

template <typename T, typename acc_t>
void backward_row(const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ w, acc_t mu,
                  acc_t rs, acc_t mg, acc_t mgx, T* __restrict__ dx, acc_t* __restrict__ pw,
                  acc_t* __restrict__ pb, int64_t N) {
  for (int64_t j = 0; j < N; ++j) {
    const acc_t d = static_cast<acc_t>(dy[j]), xh = (static_cast<acc_t>(x[j]) - mu) * rs;
    dx[j] = static_cast<T>(rs * (d * static_cast<acc_t>(w[j]) - mg - xh * mgx));
    pw[j] += d * xh;
    pb[j] += d;
  }
}

// The exercises' CPU parts take float or double: a float16 or bfloat16 row goes through float (`buf`), as
// the math does anyway.
template <typename T, typename acc_t>
const acc_t* as_acc(const T* p, int64_t n, std::vector<acc_t>& buf) {
  if constexpr (std::is_same_v<T, acc_t>) {
    return p;
  } else {
    buf.assign(p, p + n);
    return buf.data();
  }
}

// grad_x of one row by the exercise (layernorm_backward_row.cuh, Part 1), and the row's share of the
// column sums of grad_weight and grad_bias.
template <typename T, typename acc_t>
void backward_row_exercise(const T* x, const T* dy, const acc_t* w, acc_t mu, acc_t rs, T* dx, acc_t* pw,
                           acc_t* pb, int64_t N, std::vector<acc_t> (&buf)[3]) {
  const acc_t *xa = as_acc(x, N, buf[0]), *ga = as_acc(dy, N, buf[1]);
  if constexpr (std::is_same_v<T, acc_t>) {
    layernorm_exercise_backward_row(ga, xa, w, mu, rs, N, dx);
  } else {
    buf[2].assign(N, std::numeric_limits<acc_t>::quiet_NaN());  // what an unfinished exercise leaves
    layernorm_exercise_backward_row(ga, xa, w, mu, rs, N, buf[2].data());
    for (int64_t j = 0; j < N; ++j) dx[j] = static_cast<T>(buf[2][j]);
  }
  for (int64_t j = 0; j < N; ++j) {
    pw[j] += ga[j] * (xa[j] - mu) * rs;
    pb[j] += ga[j];
  }
}

template <typename T, typename acc_t>
void forward_cpu(const T* x, const T* w, const T* b, T* y, acc_t* mean, acc_t* rstd, int64_t M, int64_t N,
                 acc_t eps, bool exercise) {
  at::parallel_for(0, M, std::max<int64_t>(1, 32768 / N), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> buf;
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * N;
      mean[r] = rstd[r] = std::numeric_limits<acc_t>::quiet_NaN();  // what an unfinished exercise leaves
      if (exercise)
        layernorm_exercise_row_stats(as_acc(xr, N, buf), N, eps, mean + r, rstd + r);
      else
        row_stats(xr, N, eps, mean + r, rstd + r);
      normalize_row(xr, w, b, mean[r], rstd[r], y + r * N, N);
    }
  });
}

// grad_x row by row; grad_weight and grad_bias summed per fixed chunk of rows, then the chunks added in
// order: the same result whatever the number of threads. `exercise`: grad_x by the exercise (backward v1).
template <typename T, typename acc_t>
void backward_cpu(const T* dy, const T* x, const acc_t* mean, const acc_t* rstd, const T* w, T* dx, T* dw,
                  T* db, int64_t M, int64_t N, bool exercise) {
  const int64_t rows_per_chunk = std::max<int64_t>(64, (M + 63) / 64);
  const int64_t chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<acc_t> part(chunks * 2 * N, acc_t(0));
  std::vector<acc_t> w_buf;
  const acc_t* wa = exercise ? as_acc(w, N, w_buf) : nullptr;
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    std::vector<acc_t> buf[3];
    for (int64_t ch = cb; ch < ce; ++ch) {
      acc_t* pw = part.data() + ch * 2 * N;
      acc_t* pb = pw + N;
      for (int64_t r = ch * rows_per_chunk; r < std::min(M, (ch + 1) * rows_per_chunk); ++r) {
        const T *xr = x + r * N, *gr = dy + r * N;
        const acc_t mu = mean[r], rs = rstd[r];
        if (exercise) {
          backward_row_exercise(xr, gr, wa, mu, rs, dx + r * N, pw, pb, N, buf);
          continue;
        }
        auto g = [&](int64_t j) { return static_cast<acc_t>(gr[j]) * static_cast<acc_t>(w[j]); };
        const acc_t mg = blocked_sum<acc_t>(N, g) / N;
        const acc_t mgx =
            blocked_sum<acc_t>(N, [&](int64_t j) { return g(j) * (static_cast<acc_t>(xr[j]) - mu) * rs; }) /
            N;
        backward_row(xr, gr, w, mu, rs, mg, mgx, dx + r * N, pw, pb, N);
      }
    }
  });
  at::parallel_for(0, N, 4096, [&](int64_t jb, int64_t je) {
    for (int64_t j = jb; j < je; ++j) {
      acc_t sw = 0, sb = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        sw += part[ch * 2 * N + j];
        sb += part[ch * 2 * N + N + j];
      }
      dw[j] = static_cast<T>(sw);
      db[j] = static_cast<T>(sb);
    }
  });
}

// x is [..., N] with N >= 1; `param` ([N], x's dtype and device) is weight or bias.
void check_x(const at::Tensor& x) {
  check_floating(x, "x");
  check_cuda_built(x, "x");
  TORCH_CHECK_VALUE(x.dim() >= 1, "x must have at least one dimension (the one normalized), got a scalar");
  TORCH_CHECK_VALUE(x.size(-1) >= 1, "x's last dimension (the normalized size N) must be at least 1, got ",
                    shape_str(x.sizes()));
  TORCH_CHECK_VALUE(x.size(-1) <= INT_MAX, "x's last dimension must be below 2^31, got ",
                    std::to_string(x.size(-1)));
}

void check_param(const at::Tensor& p, const char* name, const at::Tensor& x) {
  check_floating(p, name);
  check_same_device(p, name, x, "x");
  check_same_dtype(p, name, x, "x");
  check_shape(p, name, {x.size(-1)});
}

const char* dtype_name(at::ScalarType s) {
  switch (s) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    default:
      return c10::toString(s);
  }
}

std::vector<int64_t> leading_shape(const at::Tensor& x) {
  return std::vector<int64_t>(x.sizes().begin(), x.sizes().end() - 1);
}

// Python's `kernel` name as the enum of layernorm_choices.h: one of `names`, and other than "auto" only
// for the version that has the choice (forward v3, backward v2).
template <typename Kernel, size_t K>
Kernel kernel_named(const std::string& name, const std::pair<Kernel, const char*> (&names)[K], const char* op,
                    int64_t version, int64_t version_with_choice) {
  const Kernel kernel = check_choice(name, (std::string(op) + " kernel").c_str(), names);
  TORCH_CHECK_VALUE(kernel == Kernel::kAuto || version == version_with_choice, op, " kernel=\"", name,
                    "\" is a kernel of version ", std::to_string(version_with_choice), ", got version ",
                    std::to_string(version));
  return kernel;
}

}  // namespace

std::vector<at::Tensor> forward(const at::Tensor& x_in, const at::Tensor& weight_in,
                                const at::Tensor& bias_in, double eps, int64_t version,
                                const std::string& kernel_name) {
  check_version(version, 3);
  const ForwardKernel kernel = kernel_named(kernel_name, kForwardKernelNames, "forward", version, 3);
  check_x(x_in);
  check_param(weight_in, "weight", x_in);
  check_param(bias_in, "bias", x_in);
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0, "eps must be a finite number >= 0, got ",
                    std::to_string(eps));
  const at::Tensor x = x_in.contiguous(), w = weight_in.contiguous(), b = bias_in.contiguous();
  at::Tensor y = at::empty_like(x);
  at::Tensor mean = at::empty(leading_shape(x), x.options().dtype(acc_dtype(x)));
  at::Tensor rstd = at::empty_like(mean);
  const int64_t N = x.size(-1), M = x.numel() / N;
  if (M == 0) return {y, mean, rstd};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "layernorm_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (x.is_cpu()) {
      forward_cpu(x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(),
                  y.data_ptr<scalar_t>(), mean.data_ptr<acc_t>(), rstd.data_ptr<acc_t>(), M, N,
                  static_cast<acc_t>(eps), version == 2);
      return;
    }
#ifdef WITH_CUDA
    using cuda_t = typename CudaType<scalar_t>::type;
    const OnDevice on(x);
    const cuda_t *xp = cuda_ptr<scalar_t>(x), *wp = cuda_ptr<scalar_t>(w), *bp = cuda_ptr<scalar_t>(b);
    cuda_t* yp = cuda_ptr<scalar_t>(y);
    acc_t *mp = mean.data_ptr<acc_t>(), *rp = rstd.data_ptr<acc_t>();
    const auto e = static_cast<acc_t>(eps);
    if (version == 1) layernorm_forward_v1<cuda_t>(xp, wp, bp, yp, mp, rp, M, int(N), e, on.stream);
    if (version == 2) layernorm_forward_v2<cuda_t>(xp, wp, bp, yp, mp, rp, M, int(N), e, on.stream);
    if (version == 3) layernorm_forward_v3<cuda_t>(xp, wp, bp, yp, mp, rp, M, int(N), e, on.stream, kernel);
#endif
  });
  return {y, mean, rstd};
}

std::vector<at::Tensor> backward(const at::Tensor& grad_y_in, const at::Tensor& x_in,
                                 const at::Tensor& mean_in, const at::Tensor& rstd_in,
                                 const at::Tensor& weight_in, int64_t version,
                                 const std::string& kernel_name) {
  check_version(version, 2);
  const BackwardKernel kernel = kernel_named(kernel_name, kBackwardKernelNames, "backward", version, 2);
  check_x(x_in);
  check_param(weight_in, "weight", x_in);
  check_floating(grad_y_in, "grad_y");
  check_same_device(grad_y_in, "grad_y", x_in, "x");
  check_same_dtype(grad_y_in, "grad_y", x_in, "x");
  check_shape(grad_y_in, "grad_y", x_in.sizes());
  const auto leading = leading_shape(x_in);
  for (const auto& [t, name] : {std::pair{mean_in, "mean"}, std::pair{rstd_in, "rstd"}}) {
    TORCH_CHECK_VALUE(t.defined(), name, " must be a tensor, got None");
    check_same_device(t, name, x_in, "x");
    TORCH_CHECK_TYPE(t.scalar_type() == acc_dtype(x_in), name, " must be ", dtype_name(acc_dtype(x_in)),
                     " (what forward returns for a ", dtype_name(x_in.scalar_type()), " x), got ",
                     dtype_name(t.scalar_type()));
    check_shape(t, name, leading);
  }
  const at::Tensor x = x_in.contiguous(), grad_y = grad_y_in.contiguous(), w = weight_in.contiguous();
  const at::Tensor mean = mean_in.contiguous(), rstd = rstd_in.contiguous();
  at::Tensor grad_x = at::empty_like(x);
  at::Tensor grad_w = at::empty_like(w), grad_b = at::empty_like(w);
  const int64_t N = x.size(-1), M = x.numel() / N;
  if (M == 0) return {grad_x, grad_w.zero_(), grad_b.zero_()};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "layernorm_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (x.is_cpu()) {
      backward_cpu(grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), mean.data_ptr<acc_t>(),
                   rstd.data_ptr<acc_t>(), w.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(),
                   grad_w.data_ptr<scalar_t>(), grad_b.data_ptr<scalar_t>(), M, N, version == 1);
      return;
    }
#ifdef WITH_CUDA
    using cuda_t = typename CudaType<scalar_t>::type;
    const OnDevice on(x);
    const cuda_t *gy = cuda_ptr<scalar_t>(grad_y), *xp = cuda_ptr<scalar_t>(x), *wp = cuda_ptr<scalar_t>(w);
    cuda_t* gx = cuda_ptr<scalar_t>(grad_x);
    if (version == 1) {
      layernorm_backward_v1<cuda_t>(gy, xp, mean.data_ptr<acc_t>(), rstd.data_ptr<acc_t>(), wp, gx,
                                    cuda_ptr<scalar_t>(grad_w), cuda_ptr<scalar_t>(grad_b), M, int(N),
                                    on.stream);
      return;
    }
    at::Tensor workspace = at::empty(
        {layernorm_backward_v2_workspace<cuda_t>(gy, xp, wp, gx, M, int(N), kernel)}, mean.options());
    layernorm_backward_v2<cuda_t>(gy, xp, mean.data_ptr<acc_t>(), rstd.data_ptr<acc_t>(), wp, gx,
                                  cuda_ptr<scalar_t>(grad_w), cuda_ptr<scalar_t>(grad_b),
                                  workspace.data_ptr<acc_t>(), M, int(N), on.stream, kernel);
#endif
  });
  return {grad_x, grad_w, grad_b};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "LayerNorm over the last dimension, forward and backward (lesson 03)";
  m.def("forward", &forward, "[y, mean, rstd]", py::arg("x"), py::arg("weight"), py::arg("bias"),
        py::arg("eps") = 1e-5, py::arg("version") = 3, py::arg("kernel") = "auto");
  m.def("backward", &backward, "[grad_x, grad_weight, grad_bias]", py::arg("grad_y"), py::arg("x"),
        py::arg("mean"), py::arg("rstd"), py::arg("weight"), py::arg("version") = 2,
        py::arg("kernel") = "auto");
}
