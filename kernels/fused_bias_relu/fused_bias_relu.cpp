// kernels/fused_bias_relu/fused_bias_relu.cpp: the PyTorch side of y = relu(x * scale + bias) (lesson 02).
//
//   forward(x, bias, scale, version=3) -> y            versions 1, 2, 3 (fused_bias_relu.cu's header)
//   forward_mask(x, bias, scale) -> [y, mask]          mask (bool): where relu let z through
//   forward_bits(x, bias, scale) -> [y, bits]          the same as a bit mask: int32 [ceil(numel / 32)],
//                                                      bit e % 32 of word e / 32 for flat element e
//   forward_(x, bias, scale) -> x                      in place: x now holds y
//   backward(grad_y, x, bias, scale, need_bias_grad=True, version=2) -> [grad_x, grad_bias or None]
//   backward_from_mask(grad_y, mask, scale, need_bias_grad=True, version=2) -> [grad_x, grad_bias or None]
//       mask: forward_mask's bool mask, forward_bits' bits, or the output y (relu'(z) = 1 exactly where y >
//       0); versions 3 and 4 (y only): grad_bias by a pass of its own, one thread per column (3) or your
//       bias_grad exercise's block reduction (4, kernels/exercises/bias_grad.cuh)
//   bias_grad_into(grad_y, y, grad_bias, version=4) -> grad_bias   grad_bias alone, by backward v3's or v4's
//                                                      pass, written into a preallocated [C] tensor
//   fused_bias_relu(x, bias, scale, save_bits=True) -> y   differentiable: a C++ torch::autograd::Function
//                                                      saving the bits (the registered op below), or y
//
// Lesson 04: the same op registered with torch.library (namespace course, kernels/common/library.h), so that
// torch.ops.course.<op> works, torch.compile sees it and autograd runs without Python:
//   course::fused_bias_relu(x, bias, scale) -> y                 differentiable (Autograd kernel: the
//                                                                 Function below, saving the bits)
//   course::fused_bias_relu_bits(x, bias, scale) -> (y, bits)    forward_bits
//   course::fused_bias_relu_backward_bits(grad_y, bits, scale, need_bias_grad) -> (grad_x, grad_bias)
//                                                                 bits: forward_bits' bits, or the output y
//   course::fused_bias_relu_(x, bias, scale) -> ()               in place, differentiable (mark_dirty)
// helpers/ops/fused_bias_relu.py registers their fake kernels. Like native torch.relu(x * scale + bias),
// course::fused_bias_relu promotes mixed floating dtypes (bfloat16 x, float32 bias -> float32 y) and the
// in-place op rounds into x's dtype; the lesson 02 functions above (and _bits, _backward_bits) take one
// dtype.
//
// x is [..., C] of float32/float64/float16/bfloat16, bias is [C] of the same dtype on the same device,
// scale is a Python float. The math runs in float32 (float64 for float64); grad_bias is the sum over
// every dimension but the last, in a fixed order (the same bits on every run). This file checks the
// inputs, allocates the outputs, picks the dtype (AT_DISPATCH) and calls the CPU loops below or the
// CUDA launchers of fused_bias_relu.cu on PyTorch's current stream. Lesson 02's exercises are called
// through fused_bias_relu_cpu.h / .h and compiled in the torch-free fused_bias_relu.exercises.cpp / .cu:
// bias_shape_problem (check_bias's message) and backward v4's grad_bias (bias_grad_cpu, fbr_bias_grad_v4).
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/checks.h"
#include "common/library.h"

#ifdef WITH_CUDA
#include "fused_bias_relu.h"  // the launchers
#endif
#include "fused_bias_relu_cpu.h"

namespace {

constexpr int64_t kDefaultVersion = 3;          // the forward kernel used by default (v2 where v3 cannot run)
constexpr int64_t kDefaultBackwardVersion = 2;  // one cooperative kernel (v1 where that cannot run)
constexpr int64_t kGrain = 32768;               // elements per CPU task
constexpr int64_t kMaxChunks = 256;

// relu lets z through where z > 0 (and where z is NaN, like torch.relu).
template <typename acc_t>
inline bool passes(acc_t z) {
  return !(z <= acc_t(0));
}

// ------------------------------------------------------------------------------------------------
// CPU implementation: the same results as the CUDA kernels, row by row.
// ------------------------------------------------------------------------------------------------

// Written without branches on the data (std::max and selects, which compile to max/blend
// instructions): with random signs a branch per element is mispredicted half the time.
template <typename T, typename acc_t, bool kMask>
void forward_cpu(const T* x, const T* bias, acc_t scale, T* y, bool* mask, int64_t rows, int64_t cols) {
  const std::vector<acc_t> b(bias, bias + cols);
  at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const acc_t z = static_cast<acc_t>(xr[c]) * scale + b[c];
        yr[c] = static_cast<T>(std::max(z, acc_t(0)));  // z unless z < 0: a NaN goes through
        if constexpr (kMask) mask[r * cols + c] = passes(z);
      }
    }
  });
}

// The bit mask of forward_bits: bit e % 32 of word e / 32 is relu'(z) of flat element e. One task per
// range of words, each word from its own 32 elements: no two threads write the same word.
template <typename T, typename acc_t>
void bits_cpu(const T* x, const T* bias, acc_t scale, uint32_t* bits, int64_t n, int64_t cols) {
  at::parallel_for(0, (n + 31) / 32, std::max<int64_t>(1, kGrain / 32), [&](int64_t begin, int64_t end) {
    int64_t c = (begin * 32) % cols;  // the column of element e, kept up to date (no modulo per element)
    for (int64_t w = begin; w < end; ++w) {
      uint32_t word = 0;
      for (int64_t e = w * 32; e < std::min(n, w * 32 + 32); ++e) {
        word |= uint32_t(passes(static_cast<acc_t>(x[e]) * scale + static_cast<acc_t>(bias[c]))) << (e % 32);
        if (++c == cols) c = 0;
      }
      bits[w] = word;
    }
  });
}

// Rows r0..r1 of grad_x, adding each column's kept grad_y into s. Every load is unconditional and
// relu' is a select, so the compiler vectorizes the loop. `saved` is x (with b), y, or the mask.
template <Saved S, typename T, typename acc_t>
void backward_rows(const T* gy, const void* saved, const acc_t* b, acc_t scale, T* gx, acc_t* s, int64_t r0,
                   int64_t r1, int64_t cols) {
  std::vector<uint8_t> row_bits(S == Saved::kBits ? cols : 0);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t base = r * cols;
    if constexpr (S == Saved::kBits) {  // the row's bits as bytes first, a word at a time: no gather below
      const uint32_t* words = static_cast<const uint32_t*>(saved);
      for (int64_t c = 0, e = base; c < cols;) {
        const uint32_t w = words[e / 32];
        const int64_t first = e % 32, take = std::min<int64_t>(32 - first, cols - c);
        for (int64_t k = 0; k < take; ++k) row_bits[c + k] = (w >> (first + k)) & 1u;
        c += take, e += take;
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = base + c;
      bool through;
      if constexpr (S == Saved::kInput)
        through = passes(static_cast<acc_t>(static_cast<const T*>(saved)[i]) * scale + b[c]);
      else if constexpr (S == Saved::kOutput)
        through = passes(static_cast<acc_t>(static_cast<const T*>(saved)[i]));
      else if constexpr (S == Saved::kMask)
        through = static_cast<const uint8_t*>(saved)[i] != 0;  // bool's bytes, read as numbers
      else
        through = row_bits[c] != 0;
      const acc_t gv = static_cast<acc_t>(gy[i]);
      const acc_t g = through ? gv : acc_t(0);
      gx[i] = static_cast<T>(g * scale);
      s[c] += g;
    }
  }
}

// grad_x, and the bias sums per fixed chunk of rows, added in chunk order at the end: the same result
// whatever the number of threads.
template <Saved S, typename T, typename acc_t>
void backward_cpu(const T* gy, const void* saved, const acc_t* b, acc_t scale, T* gx, T* gb, int64_t rows,
                  int64_t cols) {
  const int64_t per_chunk = std::max({int64_t(1), kGrain / cols, (rows + kMaxChunks - 1) / kMaxChunks});
  const int64_t chunks = (rows + per_chunk - 1) / per_chunk;
  std::vector<acc_t> partial(chunks * cols, acc_t(0));
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t ch = cb; ch < ce; ++ch)
      backward_rows<S>(gy, saved, b, scale, gx, partial.data() + ch * cols, ch * per_chunk,
                       std::min(rows, (ch + 1) * per_chunk), cols);
  });
  if (!gb) return;
  for (int64_t c = 0; c < cols; ++c) {
    acc_t total = 0;
    for (int64_t ch = 0; ch < chunks; ++ch) total += partial[ch * cols + c];
    gb[c] = static_cast<T>(total);
  }
}

// ------------------------------------------------------------------------------------------------
// Checks and dispatch
// ------------------------------------------------------------------------------------------------

void check_x(const at::Tensor& x) {
  check_floating(x, "x");
  check_cuda_built(x, "x");
  check_not_0d(x, "x");
}

// Whose check of bias's shape runs: lesson 02's functions (the pybind module) run yours, the exercise; the
// registered ops (torch.ops.course.*, what helpers.ops and later lessons call) run the course's, so that a
// finished op never depends on the state of an exercise.
enum class BiasCheck { kYours, kCourse };

void check_bias(const at::Tensor& x, const at::Tensor& bias, BiasCheck whose = BiasCheck::kYours) {
  check_x(x);
  check_defined(bias, "bias");
  check_same_device(bias, "bias", x, "x");
  check_same_dtype(bias, "bias", x, "x");
  if (whose == BiasCheck::kCourse) {
    TORCH_CHECK_VALUE(bias.dim() == 1 && bias.size(0) == x.size(-1), "bias must have shape [C] = [",
                      std::to_string(x.size(-1)), "] to match x's last dimension, got ",
                      shape_str(bias.sizes()));
    return;
  }
  // Your check (kernels/exercises/bias_check.h): its message becomes the ValueError.
  const std::string problem =
      fbr_bias_shape_problem(x.sizes().data(), int(x.dim()), bias.sizes().data(), int(bias.dim()));
  TORCH_CHECK_VALUE(problem.empty(), problem);
  // What the kernels need, whatever that check said: they read bias[0 .. C).
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1),
              "bias_shape_problem (kernels/exercises/bias_check.h) ", "accepted bias of shape ",
              shape_str(bias.sizes()), " for x of shape ", shape_str(x.sizes()),
              ": it must reject every shape but [", std::to_string(x.size(-1)), "]");
}

// x as [rows, cols]: cols is the last dimension (C), rows everything before it.
int64_t rows_of(const at::Tensor& x) { return x.size(-1) == 0 ? 0 : x.numel() / x.size(-1); }

// y = relu(x * scale + bias) into y (which may be x), and the mask and the bit mask when given.
void forward_into(const at::Tensor& x, const at::Tensor& bias, double scale, at::Tensor& y, at::Tensor* mask,
                  int64_t version, at::Tensor* bits = nullptr) {
  const int64_t rows = rows_of(x), cols = x.size(-1);
  if (rows == 0 || cols == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "fused_bias_relu_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    bool* m = mask ? mask->data_ptr<bool>() : nullptr;
    uint32_t* bw = bits ? reinterpret_cast<uint32_t*>(bits->data_ptr<int32_t>()) : nullptr;
    if (x.is_cpu()) {
      if (bw)  // before y: y may be x
        bits_cpu(x.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), acc_t(scale), bw, x.numel(), cols);
      auto cpu = m ? forward_cpu<scalar_t, acc_t, true> : forward_cpu<scalar_t, acc_t, false>;
      cpu(x.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), acc_t(scale), y.data_ptr<scalar_t>(), m, rows,
          cols);
      return;
    }
#ifdef WITH_CUDA
    const OnDevice on(x);
    if (version == 1)
      fbr_forward_v1(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(bias), acc_t(scale), cuda_ptr<scalar_t>(y),
                     rows, cols, on.stream);
    else if (version == 2)
      fbr_forward_v2(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(bias), acc_t(scale), cuda_ptr<scalar_t>(y), m,
                     rows, cols, on.stream);
    else
      fbr_forward_v3(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(bias), acc_t(scale), cuda_ptr<scalar_t>(y), m,
                     bw, rows, cols, on.stream);
#endif
  });
}

// grad_bias alone, by backward v3's or v4's pass over grad_y and y (contiguous [rows, cols], both > 0),
// written into grad_bias: [cols], contiguous, possibly a view into a larger tensor (nothing else is written).
void bias_grad_pass(const at::Tensor& grad_y, const at::Tensor& y, at::Tensor& grad_bias, BiasSums sums) {
  const int64_t rows = rows_of(grad_y), cols = grad_y.size(-1);
  if (grad_y.is_cpu() && sums == BiasSums::kBlockSums) {  // your Part 1: float and double, 16-bit via float
    const at::ScalarType math = acc_dtype(grad_y);
    const at::Tensor g = grad_y.to(math), ym = y.to(math);
    at::Tensor out = at::empty({cols}, g.options());
    AT_DISPATCH_FLOATING_TYPES(math, "bias_grad_cpu", [&] {
      bias_grad_cpu(g.data_ptr<scalar_t>(), ym.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rows, cols);
    });
    grad_bias.copy_(out);
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, grad_y.scalar_type(), "fused_bias_relu_bias_grad", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        if (grad_y.is_cpu()) {  // v3 on the CPU: row by row (rows are contiguous), one running sum per column
          const scalar_t* gy = grad_y.data_ptr<scalar_t>();
          const scalar_t* yv = y.data_ptr<scalar_t>();
          std::vector<acc_t> sum(cols, acc_t(0));
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              if (passes(static_cast<acc_t>(yv[r * cols + c])))
                sum[c] += static_cast<acc_t>(gy[r * cols + c]);
          scalar_t* gb = grad_bias.data_ptr<scalar_t>();
          for (int64_t c = 0; c < cols; ++c) gb[c] = static_cast<scalar_t>(sum[c]);
          return;
        }
#ifdef WITH_CUDA
        const OnDevice on(grad_y);
        if (sums == BiasSums::kPerColumn) {
          fbr_bias_grad_v3(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(y), cuda_ptr<scalar_t>(grad_bias),
                           rows, cols, on.stream);
          return;
        }
        // v4's workspace: one row of partial sums per tile of rows, in the math type (allocated here, so that
        // the kernels stay torch-free; the caching allocator makes it cheap)
        at::Tensor partials =
            at::empty({fbr_bias_grad_v4_parts(rows), cols}, grad_y.options().dtype(acc_dtype(grad_y)));
        fbr_bias_grad_v4(cuda_ptr<scalar_t>(grad_y), cuda_ptr<scalar_t>(y), partials.data_ptr<acc_t>(),
                         cuda_ptr<scalar_t>(grad_bias), rows, cols, on.stream);
#endif
      });
}

// grad_x and grad_bias from grad_y and what forward saved (x and bias, y, or the mask).
std::vector<at::Tensor> backward_from(const at::Tensor& grad_y_in, const at::Tensor& saved_in, Saved kind,
                                      const at::Tensor& bias_in, double scale, bool need_bias_grad,
                                      int64_t version) {
  check_version(version, 4);
  const BiasSums sums = static_cast<BiasSums>(version);
  // v3 and v4: grad_x by v1's kernel (CPU: the loop below) without the bias sums, then grad_bias by a pass
  // of its own over grad_y and y (bias_grad_pass).
  const bool own_pass = sums == BiasSums::kPerColumn || sums == BiasSums::kBlockSums;
  TORCH_CHECK_VALUE(!own_pass || kind == Saved::kOutput, "backward version ", std::to_string(version),
                    " (grad_bias in a pass of its own) reads relu' from y: pass the output y to "
                    "backward_from_mask");
  const bool per_column = own_pass && need_bias_grad;
  const bool fused_sums = need_bias_grad && !own_pass;
  const at::Tensor grad_y = grad_y_in.contiguous(), saved = saved_in.contiguous();
  const at::Tensor bias = kind == Saved::kInput ? bias_in.contiguous() : at::Tensor();
  const int64_t rows = rows_of(grad_y), cols = grad_y.size(-1);
  at::Tensor grad_x = at::empty_like(grad_y);
  at::Tensor grad_bias = need_bias_grad ? at::empty({cols}, grad_y.options()) : at::Tensor();
  if (rows == 0 || cols == 0) {
    if (need_bias_grad) grad_bias.zero_();  // a sum over no rows
    return {grad_x, grad_bias};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, grad_y.scalar_type(), "fused_bias_relu_backward", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        if (grad_y.is_cpu()) {
          const scalar_t* gy = grad_y.data_ptr<scalar_t>();
          scalar_t* gx = grad_x.data_ptr<scalar_t>();
          scalar_t* gb = fused_sums ? grad_bias.data_ptr<scalar_t>() : nullptr;
          const acc_t s = acc_t(scale);
          const void* sv = saved.data_ptr();
          if (kind == Saved::kInput) {
            const std::vector<acc_t> b(bias.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>() + cols);
            backward_cpu<Saved::kInput>(gy, sv, b.data(), s, gx, gb, rows, cols);
          } else if (kind == Saved::kOutput) {
            backward_cpu<Saved::kOutput>(gy, sv, static_cast<const acc_t*>(nullptr), s, gx, gb, rows, cols);
          } else if (kind == Saved::kMask) {
            backward_cpu<Saved::kMask>(gy, sv, static_cast<const acc_t*>(nullptr), s, gx, gb, rows, cols);
          } else {
            backward_cpu<Saved::kBits>(gy, sv, static_cast<const acc_t*>(nullptr), s, gx, gb, rows, cols);
          }
          return;
        }
#ifdef WITH_CUDA
        using cuda_t = typename CudaType<scalar_t>::type;
        const OnDevice on(grad_y);
        const cuda_t* b = kind == Saved::kInput ? cuda_ptr<scalar_t>(bias) : nullptr;
        const void* sv = saved.data_ptr();
        at::Tensor partials;
        if (fused_sums) {
          const int parts = fbr_backward_partial_rows(cuda_ptr<scalar_t>(grad_y), sv, kind, b,
                                                      cuda_ptr<scalar_t>(grad_x), rows, cols, sums);
          partials = at::empty({parts, cols}, grad_y.options().dtype(acc_dtype(grad_y)));
        }
        fbr_backward(cuda_ptr<scalar_t>(grad_y), sv, kind, b, acc_t(scale), cuda_ptr<scalar_t>(grad_x),
                     fused_sums ? partials.data_ptr<acc_t>() : nullptr,
                     fused_sums ? cuda_ptr<scalar_t>(grad_bias) : nullptr, rows, cols, sums, on.stream);
#endif
      });
  if (per_column) bias_grad_pass(grad_y, saved, grad_bias, sums);
  return {grad_x, grad_bias};
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// The functions Python sees
// ------------------------------------------------------------------------------------------------

at::Tensor forward_checked(const at::Tensor& x_in, const at::Tensor& bias_in, double scale, int64_t version,
                           BiasCheck whose) {
  check_version(version, 3);
  check_bias(x_in, bias_in, whose);
  const at::Tensor x = x_in.contiguous(), bias = bias_in.contiguous();
  at::Tensor y = at::empty_like(x);
  forward_into(x, bias, scale, y, nullptr, version);
  return y;
}

at::Tensor forward(const at::Tensor& x, const at::Tensor& bias, double scale, int64_t version) {
  return forward_checked(x, bias, scale, version, BiasCheck::kYours);
}

std::vector<at::Tensor> forward_mask(const at::Tensor& x_in, const at::Tensor& bias_in, double scale) {
  check_bias(x_in, bias_in);
  const at::Tensor x = x_in.contiguous(), bias = bias_in.contiguous();
  at::Tensor y = at::empty_like(x);
  at::Tensor mask = at::empty_like(x, x.options().dtype(at::kBool));
  forward_into(x, bias, scale, y, &mask, kDefaultVersion);
  return {y, mask};
}

// Words of 32 bits for n elements.
int64_t bit_words(int64_t n) { return (n + 31) / 32; }

std::vector<at::Tensor> forward_bits_checked(const at::Tensor& x_in, const at::Tensor& bias_in, double scale,
                                             BiasCheck whose) {
  check_bias(x_in, bias_in, whose);
  const at::Tensor x = x_in.contiguous(), bias = bias_in.contiguous();
  at::Tensor y = at::empty_like(x);
  at::Tensor bits = at::empty({bit_words(x.numel())}, x.options().dtype(at::kInt));
  forward_into(x, bias, scale, y, nullptr, kDefaultVersion, &bits);
  return {y, bits};
}

std::vector<at::Tensor> forward_bits(const at::Tensor& x, const at::Tensor& bias, double scale) {
  return forward_bits_checked(x, bias, scale, BiasCheck::kYours);
}

namespace {

// y written over x, nothing else: the registered in-place kernel (course::fused_bias_relu_). A bias of
// another floating dtype is rounded to x's first: x keeps its dtype, as with native in-place ops.
void overwrite(at::Tensor& x, const at::Tensor& bias_in, double scale, BiasCheck whose) {
  const at::Tensor bias_x = floating_pair(x, bias_in) ? bias_in.to(x.scalar_type()) : bias_in;
  check_bias(x, bias_x, whose);
  const at::Tensor bias = bias_x.contiguous();
  if (x.is_contiguous()) {
    forward_into(x, bias, scale, x, nullptr, kDefaultVersion);
  } else {
    at::Tensor y = at::empty(x.sizes(), x.options());
    forward_into(x.contiguous(), bias, scale, y, nullptr, kDefaultVersion);
    x.copy_(y);
  }
}

}  // namespace

// In place, like torch's own `relu_`: x is overwritten and its version counter goes up, so autograd
// notices if x was saved for some backward. Differentiable only through an autograd Function that
// calls ctx.mark_dirty(x) (helpers/ops/fused_bias_relu.py), hence the check on requires_grad.
at::Tensor forward_(at::Tensor& x, const at::Tensor& bias, double scale) {
  check_bias(x, bias);
  TORCH_CHECK(
      !(at::GradMode::is_enabled() && x.requires_grad()),
      "forward_ writes into x, which requires grad: autograd would not see the change. Call it from an "
      "autograd Function that marks x dirty (fused_bias_relu_ in helpers/ops/fused_bias_relu.py)");
  overwrite(x, bias, scale, BiasCheck::kYours);
  torch::autograd::impl::bump_version(x);
  return x;
}

std::vector<at::Tensor> backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& bias,
                                 double scale, bool need_bias_grad, int64_t version) {
  check_bias(x, bias);
  check_like(grad_y, "grad_y", x, "x");
  check_same_dtype(grad_y, "grad_y", x, "x");
  return backward_from(grad_y, x, Saved::kInput, bias, scale, need_bias_grad, version);
}

std::vector<at::Tensor> backward_from_mask(const at::Tensor& grad_y, const at::Tensor& mask, double scale,
                                           bool need_bias_grad, int64_t version) {
  check_floating(grad_y, "grad_y");
  check_cuda_built(grad_y, "grad_y");
  check_not_0d(grad_y, "grad_y");
  check_defined(mask, "mask");
  check_same_device(mask, "mask", grad_y, "grad_y");
  const auto type = mask.scalar_type();
  TORCH_CHECK_TYPE(
      type == at::kBool || type == at::kInt || type == grad_y.scalar_type(),
      "mask must be bool (from forward_mask), int32 bits (from forward_bits) or the output y (the "
      "dtype of grad_y, ",
      grad_y.scalar_type(), "), got ", type);
  if (type == at::kInt)
    check_shape(mask, "mask (int32 bits)", {bit_words(grad_y.numel())});
  else
    check_shape(mask, "mask", grad_y.sizes());
  const Saved kind = type == at::kBool ? Saved::kMask : (type == at::kInt ? Saved::kBits : Saved::kOutput);
  return backward_from(grad_y, mask, kind, at::Tensor(), scale, need_bias_grad, version);
}

// grad_bias alone, by backward v3's or v4's pass, written into `grad_bias`: a [C] tensor of grad_y's dtype
// and device, contiguous, possibly a view into a larger one (lesson 02's self-check guards the bytes around
// it).
at::Tensor bias_grad_into(const at::Tensor& grad_y_in, const at::Tensor& y_in, at::Tensor& grad_bias,
                          int64_t version) {
  check_floating(grad_y_in, "grad_y");
  check_cuda_built(grad_y_in, "grad_y");
  check_not_0d(grad_y_in, "grad_y");
  check_like(y_in, "y", grad_y_in, "grad_y");
  check_same_dtype(y_in, "y", grad_y_in, "grad_y");
  check_defined(grad_bias, "grad_bias");
  check_same_device(grad_bias, "grad_bias", grad_y_in, "grad_y");
  check_same_dtype(grad_bias, "grad_bias", grad_y_in, "grad_y");
  check_shape(grad_bias, "grad_bias", {grad_y_in.size(-1)});
  TORCH_CHECK_VALUE(grad_bias.is_contiguous(),
                    "grad_bias must be contiguous (a view into a larger tensor is fine)");
  TORCH_CHECK_VALUE(version == 3 || version == 4,
                    "bias_grad_into runs backward version 3 or 4 (grad_bias in a pass of its own), got ",
                    std::to_string(version));
  const at::Tensor grad_y = grad_y_in.contiguous(), y = y_in.contiguous();
  if (rows_of(grad_y) == 0 || grad_y.size(-1) == 0) return grad_bias.zero_();  // a sum over no rows
  bias_grad_pass(grad_y, y, grad_bias, static_cast<BiasSums>(version));
  return grad_bias;
}

// ---------------------------------------------------------------------------------------------------
// The op as a real PyTorch op (lesson 04): the schemas, and the CPU and CUDA kernels (the functions above,
// which handle both devices). Its Autograd kernels are in fused_bias_relu.autograd.cpp.
// ---------------------------------------------------------------------------------------------------

namespace {

// The registered kernels. course::fused_bias_relu: the forward alone (no mask: nothing to save when
// autograd is not recording), mixed dtypes promoted as native does.
at::Tensor fused_bias_relu_kernel(const at::Tensor& x, const at::Tensor& bias, double scale) {
  if (floating_pair(x, bias))
    return forward_checked(x.to(promoted(x, bias)), bias.to(promoted(x, bias)), scale, kDefaultVersion,
                           BiasCheck::kCourse);
  return forward_checked(x, bias, scale, kDefaultVersion, BiasCheck::kCourse);
}

std::tuple<at::Tensor, at::Tensor> fused_bias_relu_bits_kernel(const at::Tensor& x, const at::Tensor& bias,
                                                               double scale) {
  auto out = forward_bits_checked(x, bias, scale, BiasCheck::kCourse);
  return {out[0], out[1]};
}

// `bits` as backward_from_mask takes it: forward_bits' int32 bits, or the output y (what the in-place op
// keeps). grad_bias always: an empty [0] tensor when not needed (a schema's outputs are tensors, not None).
std::tuple<at::Tensor, at::Tensor> fused_bias_relu_backward_bits_kernel(const at::Tensor& grad_y,
                                                                        const at::Tensor& bits, double scale,
                                                                        bool need_bias_grad) {
  auto out = backward_from_mask(grad_y, bits, scale, need_bias_grad, kDefaultBackwardVersion);
  return {out[0], need_bias_grad ? out[1] : at::empty({0}, grad_y.options())};
}

void fused_bias_relu_inplace_kernel(at::Tensor& x, const at::Tensor& bias, double scale) {
  overwrite(x, bias, scale, BiasCheck::kCourse);
}

}  // namespace

COURSE_LIBRARY(m) {
  define(m, "fused_bias_relu(Tensor x, Tensor bias, float scale) -> Tensor");
  define(m, "fused_bias_relu_bits(Tensor x, Tensor bias, float scale) -> (Tensor, Tensor)");
  define(m,
         "fused_bias_relu_backward_bits(Tensor grad_y, Tensor bits, float scale, bool need_bias_grad) -> "
         "(Tensor, Tensor)");
  define(m, "fused_bias_relu_(Tensor(a!) x, Tensor bias, float scale) -> ()");
}
COURSE_IMPL_CPU_CUDA(m) {
  m.impl("fused_bias_relu", &fused_bias_relu_kernel);
  m.impl("fused_bias_relu_bits", &fused_bias_relu_bits_kernel);
  m.impl("fused_bias_relu_backward_bits", &fused_bias_relu_backward_bits_kernel);
  m.impl("fused_bias_relu_", &fused_bias_relu_inplace_kernel);
}
// Lesson 02's differentiable binding, in fused_bias_relu.autograd.cpp with the autograd Functions.
at::Tensor fused_bias_relu(const at::Tensor& x, const at::Tensor& bias, double scale, bool save_bits);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "y = relu(x * scale + bias) for x [..., C] and bias [C] (lesson 02)";
  m.def("forward", &forward, "y = relu(x * scale + bias)", py::arg("x"), py::arg("bias"),
        py::arg("scale") = 1.0, py::arg("version") = kDefaultVersion);
  m.def("forward_mask", &forward_mask, "[y, mask]: mask (bool) is where relu let x * scale + bias through",
        py::arg("x"), py::arg("bias"), py::arg("scale") = 1.0);
  m.def("forward_bits", &forward_bits,
        "[y, bits]: bits (int32, ceil(numel / 32) words) has bit e % 32 of word e / 32 set where relu let "
        "element e through",
        py::arg("x"), py::arg("bias"), py::arg("scale") = 1.0);
  m.def("forward_", &forward_, "in place: x = relu(x * scale + bias); returns x", py::arg("x"),
        py::arg("bias"), py::arg("scale") = 1.0);
  m.def("backward", &backward, "[grad_x, grad_bias (None unless need_bias_grad)] from the input x",
        py::arg("grad_y"), py::arg("x"), py::arg("bias"), py::arg("scale") = 1.0,
        py::arg("need_bias_grad") = true, py::arg("version") = kDefaultBackwardVersion);
  m.def(
      "backward_from_mask", &backward_from_mask,
      "[grad_x, grad_bias (None unless need_bias_grad)] from forward_mask's mask, forward_bits' bits or the "
      "output y",
      py::arg("grad_y"), py::arg("mask"), py::arg("scale") = 1.0, py::arg("need_bias_grad") = true,
      py::arg("version") = kDefaultBackwardVersion);
  m.def("bias_grad_into", &bias_grad_into,
        "grad_bias alone (the sum over rows of grad_y where y > 0), by backward v3's or v4's pass, written "
        "into "
        "the preallocated [C] tensor grad_bias; returns it",
        py::arg("grad_y"), py::arg("y"), py::arg("grad_bias"), py::arg("version") = 4);
  m.def("fused_bias_relu", &fused_bias_relu, "differentiable relu(x * scale + bias): a C++ autograd Function",
        py::arg("x"), py::arg("bias"), py::arg("scale") = 1.0, py::arg("save_bits") = true);
}
