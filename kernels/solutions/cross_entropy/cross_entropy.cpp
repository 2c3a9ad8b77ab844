// cross_entropy.cpp: the PyTorch side of course::cross_entropy (lesson 09's practice op: the answer): softmax
// cross-entropy of logits [N, V] against int64 targets [N], fused, as F.cross_entropy computes it
// (ignore_index, label smoothing, the three reductions), without a softmax tensor.
//
//   course::cross_entropy(logits, target, ignore_index, label_smoothing, reduction) -> (loss, lse)
//   course::cross_entropy_backward(grad_loss, logits, target, lse, ignore_index, label_smoothing, reduction)
//       -> grad_logits [N, V]
//   course::cross_entropy_inplace_(logits, target, ignore_index, label_smoothing, reduction) -> loss, and
//       logits overwritten by d loss / d logits
//   course::cross_entropy_scale_(grad, grad_loss) -> ()   grad's rows times grad_loss (the in-place backward)
//
// reduction: 0 none ([N] losses), 1 mean (over the rows whose target is not ignore_index), 2 sum. The loss
// has the logits' dtype, as F.cross_entropy's; lse is float32 (float64 for float64 logits), the math's type.
//
// This file checks the inputs (an error names the argument), picks the layout, allocates the outputs, picks
// the dtype and runs the CPU loops (cross_entropy.cpu.cpp, over threads) or the CUDA launchers
// (cross_entropy.cu) on PyTorch's current stream; then registers the functions as the ops' CPU and CUDA
// kernels. cross_entropy.py registers the fake kernels and the autograd formula.
//
// A target outside [0, V) that is not ignore_index: on the CPU an IndexError naming target (a loop over the N
// targets); on the GPU that check would need the result on the host, a synchronization per call, so the
// kernels give the row a NaN loss (and NaN gradient) instead, which the mean carries.
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: makes the library importable as a Python module

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/checks.h"
#include "common/library.h"
#include "cross_entropy_cpu.h"
#include "cross_entropy_math.h"
#ifdef WITH_CUDA
#include "cross_entropy.h"
#endif

// The dtypes the op takes: float32, float16 and bfloat16 (the math in float), and float64 (for gradcheck).
#define CE_DISPATCH(TYPE, NAME, ...)                                                                      \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                                                          \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__) AT_DISPATCH_CASE(at::kDouble, __VA_ARGS__) \
                         AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)                                         \
                             AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

namespace {

constexpr int64_t kGrain = 32768;  // values per CPU task: smaller tasks cost more to hand out than they take

int64_t grain_rows(int64_t V) { return std::max<int64_t>(1, kGrain / V); }

void check_logits(const at::Tensor& logits) {
  check_floating(logits, "logits");
  check_cuda_built(logits, "logits");
  TORCH_CHECK_VALUE(logits.dim() == 2,
                    "logits must be [N, V] (a row of V class scores per sample), got shape ",
                    shape_str(logits.sizes()));
  TORCH_CHECK_VALUE(logits.size(1) > 0, "logits must have at least one class (V >= 1), got shape ",
                    shape_str(logits.sizes()));
}

void check_target(const at::Tensor& target, const at::Tensor& logits) {
  check_defined(target, "target");
  TORCH_CHECK_TYPE(target.scalar_type() == at::kLong, "target must be int64 (class indices), got ",
                   target.scalar_type());
  check_same_device(target, "target", logits, "logits");
  check_shape(target, "target", {logits.size(0)});
}

void check_options(double label_smoothing, int64_t reduction) {
  TORCH_CHECK_VALUE(label_smoothing >= 0.0 && label_smoothing <= 1.0,
                    "label_smoothing must be between 0.0 and 1.0, got ", std::to_string(label_smoothing));
  TORCH_CHECK_VALUE(reduction >= kReduceNone && reduction <= kReduceSum,
                    "reduction must be 0 (none), 1 (mean) or 2 (sum), got ", std::to_string(reduction));
}

// The rows whose target counts (not ignore_index), after checking every target on the CPU: in [0, V) or
// ignore_index, else an IndexError naming it, as F.cross_entropy raises.
int64_t counted_rows_cpu(const at::Tensor& target, int64_t V, int64_t ignore_index) {
  const int64_t* t = target.data_ptr<int64_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < target.numel(); ++r) {
    if (t[r] == ignore_index) continue;
    TORCH_CHECK_INDEX(t[r] >= 0 && t[r] < V, "target[", std::to_string(r), "] = ", std::to_string(t[r]),
                      " is out of range: a target must be in [0, ", std::to_string(V),
                      ") (the logits' classes) or equal ignore_index (", std::to_string(ignore_index), ")");
    ++count;
  }
  return count;
}

// Unit stride along the classes (a copy where it is not), so that rows are read with 16-byte loads; the rows'
// own stride is kept (logits[:, :V] of a wider tensor need no copy).
at::Tensor rows_unit_stride(const at::Tensor& logits) {
  return logits.stride(1) == 1 || logits.size(1) == 1 ? logits : logits.contiguous();
}

int64_t row_stride(const at::Tensor& logits) {
  return logits.size(0) > 1 ? logits.stride(0) : logits.size(1);
}

// The loss of `rows` per-row losses (CeAcc), reduced on the CPU: in row order, in double.
template <typename A>
at::Tensor reduce_cpu(const at::Tensor& row_loss, int64_t reduction, int64_t count, at::ScalarType dtype) {
  if (reduction == kReduceNone) return row_loss.to(dtype);
  const A* l = row_loss.data_ptr<A>();
  double sum = 0;
  for (int64_t r = 0; r < row_loss.numel(); ++r) sum += l[r];
  const double loss = reduction == kReduceMean ? sum / double(count) : sum;  // a mean of no rows: NaN
  return at::full({}, loss, row_loss.options().dtype(dtype));
}

#ifdef WITH_CUDA
// The CUDA launchers' scratch memory: the rows' losses before the mean or sum (Acc), and the mean's count.
struct Scratch {
  at::Tensor rows, counted;
  Scratch(const at::Tensor& logits, int64_t N, int64_t reduction)
      : rows(at::empty({reduction == kReduceNone ? 0 : N}, logits.options().dtype(acc_dtype(logits)))),
        counted(at::empty({reduction == kReduceMean ? 1 : 0}, logits.options().dtype(at::kDouble))) {}
  template <typename A>
  A* row_loss() const {
    return rows.numel() ? rows.data_ptr<A>() : nullptr;
  }
  double* count() const { return counted.numel() ? counted.data_ptr<double>() : nullptr; }
};
#endif

at::Tensor empty_loss(const at::Tensor& logits, int64_t reduction) {
  return reduction == kReduceNone ? at::empty({logits.size(0)}, logits.options())
                                  : at::empty({}, logits.options());
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> cross_entropy_kernel(const at::Tensor& logits_in,
                                                        const at::Tensor& target_in, int64_t ignore_index,
                                                        double label_smoothing, int64_t reduction) {
  check_logits(logits_in);
  check_target(target_in, logits_in);
  check_options(label_smoothing, reduction);
  const at::Tensor logits = rows_unit_stride(logits_in), target = target_in.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1), ld = row_stride(logits);
  at::Tensor lse = at::empty({N}, logits.options().dtype(acc_dtype(logits)));
  at::Tensor loss = empty_loss(logits, reduction);
  if (N == 0) {  // nothing to launch: no rows, so a sum of 0 and a mean of no rows (NaN, as F.cross_entropy)
    if (reduction != kReduceNone) loss.fill_(reduction == kReduceSum ? 0.0 : std::nan(""));
    return {loss, lse};
  }
  CE_DISPATCH(logits.scalar_type(), "cross_entropy", [&] {
    if (logits.is_cpu()) {
      using A = CeAcc<scalar_t>;
      const int64_t count = counted_rows_cpu(target, V, ignore_index);
      at::Tensor row_loss = at::empty({N}, lse.options());
      at::parallel_for(0, N, grain_rows(V), [&](int64_t begin, int64_t end) {
        cross_entropy_forward_cpu(logits.data_ptr<scalar_t>(), ld, target.data_ptr<int64_t>(),
                                  row_loss.data_ptr<A>(), lse.data_ptr<A>(), begin, end, V, ignore_index,
                                  label_smoothing);
      });
      loss = reduce_cpu<A>(row_loss, reduction, count, logits.scalar_type());
      return;
    }
#ifdef WITH_CUDA
    using C = typename CudaType<scalar_t>::type;
    const OnDevice on(logits);
    const Scratch scratch(logits, N, reduction);
    cross_entropy_forward_cuda<C>(cuda_ptr<scalar_t>(logits), nullptr, ld, target.data_ptr<int64_t>(), N, V,
                                  ignore_index, label_smoothing, reduction, cuda_ptr<scalar_t>(loss),
                                  lse.data_ptr<Acc<C>>(), scratch.row_loss<Acc<C>>(), scratch.count(),
                                  on.stream);
#endif
  });
  return {loss, lse};
}

at::Tensor cross_entropy_backward_kernel(const at::Tensor& grad_loss_in, const at::Tensor& logits_in,
                                         const at::Tensor& target_in, const at::Tensor& lse_in,
                                         int64_t ignore_index, double label_smoothing, int64_t reduction) {
  check_logits(logits_in);
  check_target(target_in, logits_in);
  check_options(label_smoothing, reduction);
  check_defined(grad_loss_in, "grad_loss");
  check_same_device(grad_loss_in, "grad_loss", logits_in, "logits");
  check_same_dtype(grad_loss_in, "grad_loss", logits_in, "logits");
  const std::vector<int64_t> loss_shape =
      reduction == kReduceNone ? std::vector<int64_t>{logits_in.size(0)} : std::vector<int64_t>{};
  check_shape(grad_loss_in, "grad_loss", loss_shape);  // the loss's: [N] unreduced, else a scalar
  check_defined(lse_in, "lse");
  check_same_device(lse_in, "lse", logits_in, "logits");
  TORCH_CHECK_TYPE(lse_in.scalar_type() == acc_dtype(logits_in), "lse must be ", acc_dtype(logits_in),
                   " for ", logits_in.scalar_type(), " logits (what course::cross_entropy returns), got ",
                   lse_in.scalar_type());
  check_shape(lse_in, "lse", {logits_in.size(0)});
  const at::Tensor logits = rows_unit_stride(logits_in), target = target_in.contiguous();
  const at::Tensor grad_loss = grad_loss_in.contiguous(), lse = lse_in.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1), ld = row_stride(logits);
  at::Tensor grad = at::empty({N, V}, logits.options());
  if (N == 0) return grad;
  CE_DISPATCH(logits.scalar_type(), "cross_entropy_backward", [&] {
    if (logits.is_cpu()) {
      using A = CeAcc<scalar_t>;
      const int64_t count = counted_rows_cpu(target, V, ignore_index);
      const double scale = reduction == kReduceMean ? 1.0 / double(count) : 1.0;
      at::parallel_for(0, N, grain_rows(V), [&](int64_t begin, int64_t end) {
        cross_entropy_backward_cpu(logits.data_ptr<scalar_t>(), ld, grad.data_ptr<scalar_t>(), V,
                                   target.data_ptr<int64_t>(), lse.data_ptr<A>(),
                                   grad_loss.data_ptr<scalar_t>(), reduction == kReduceNone ? 1 : 0, scale,
                                   begin, end, V, ignore_index, label_smoothing);
      });
      return;
    }
#ifdef WITH_CUDA
    using C = typename CudaType<scalar_t>::type;
    const OnDevice on(logits);
    const Scratch scratch(logits, N, reduction);
    cross_entropy_backward_cuda<C>(cuda_ptr<scalar_t>(grad_loss), reduction == kReduceNone,
                                   cuda_ptr<scalar_t>(logits), ld, target.data_ptr<int64_t>(),
                                   lse.data_ptr<Acc<C>>(), cuda_ptr<scalar_t>(grad), N, V, ignore_index,
                                   label_smoothing, reduction, scratch.count(), on.stream);
#endif
  });
  return grad;
}

namespace {

// logits to be overwritten: unit stride along the classes (a copy would take the gradient, not logits), and
// no two elements in one place (an expanded tensor).
void check_writable_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(
      t.size(1) == 1 || t.stride(1) == 1, name,
      " must have unit stride along the classes (dimension 1) to be overwritten in place, got strides ",
      shape_str(t.strides()), ": pass ", name, ".contiguous()");
  TORCH_CHECK_VALUE(
      at::has_internal_overlap(t) != at::MemOverlap::Yes, name,
      " has elements that share memory (an expanded tensor): it cannot be overwritten in place");
}

}  // namespace

at::Tensor cross_entropy_inplace_kernel(at::Tensor& logits, const at::Tensor& target_in, int64_t ignore_index,
                                        double label_smoothing, int64_t reduction) {
  check_logits(logits);
  check_target(target_in, logits);
  check_options(label_smoothing, reduction);
  check_writable_rows(logits, "logits");
  const at::Tensor target = target_in.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1), ld = row_stride(logits);
  at::Tensor loss = empty_loss(logits, reduction);
  if (N == 0) {
    if (reduction != kReduceNone) loss.fill_(reduction == kReduceSum ? 0.0 : std::nan(""));
    return loss;
  }
  CE_DISPATCH(logits.scalar_type(), "cross_entropy_inplace_", [&] {
    if (logits.is_cpu()) {
      using A = CeAcc<scalar_t>;
      const int64_t count = counted_rows_cpu(target, V, ignore_index);
      const double scale = reduction == kReduceMean ? 1.0 / double(count) : 1.0;
      at::Tensor row_loss = at::empty({N}, logits.options().dtype(acc_dtype(logits)));
      at::Tensor lse = at::empty_like(row_loss);
      scalar_t* x = logits.data_ptr<scalar_t>();
      at::parallel_for(0, N, grain_rows(V), [&](int64_t begin, int64_t end) {
        cross_entropy_forward_cpu(x, ld, target.data_ptr<int64_t>(), row_loss.data_ptr<A>(),
                                  lse.data_ptr<A>(), begin, end, V, ignore_index, label_smoothing);
        cross_entropy_backward_cpu<scalar_t>(x, ld, x, ld, target.data_ptr<int64_t>(), lse.data_ptr<A>(),
                                             nullptr, 0, scale, begin, end, V, ignore_index, label_smoothing);
      });
      loss = reduce_cpu<A>(row_loss, reduction, count, logits.scalar_type());
      return;
    }
#ifdef WITH_CUDA
    using C = typename CudaType<scalar_t>::type;
    const OnDevice on(logits);
    const Scratch scratch(logits, N, reduction);
    cross_entropy_forward_cuda<C>(cuda_ptr<scalar_t>(logits), cuda_ptr<scalar_t>(logits), ld,
                                  target.data_ptr<int64_t>(), N, V, ignore_index, label_smoothing, reduction,
                                  cuda_ptr<scalar_t>(loss), nullptr, scratch.row_loss<Acc<C>>(),
                                  scratch.count(), on.stream);
#endif
  });
  return loss;
}

void cross_entropy_scale_kernel(at::Tensor& grad, const at::Tensor& grad_loss_in) {
  check_floating(grad, "grad");
  check_cuda_built(grad, "grad");
  TORCH_CHECK_VALUE(grad.dim() == 2, "grad must be [N, V], got shape ", shape_str(grad.sizes()));
  check_writable_rows(grad, "grad");
  check_defined(grad_loss_in, "grad_loss");
  check_same_device(grad_loss_in, "grad_loss", grad, "grad");
  check_same_dtype(grad_loss_in, "grad_loss", grad, "grad");
  TORCH_CHECK_VALUE(grad_loss_in.dim() == 0 || grad_loss_in.sizes() == at::IntArrayRef{grad.size(0)},
                    "grad_loss must be a scalar (the mean or sum's gradient) or have shape [",
                    std::to_string(grad.size(0)), "] (one per row), got shape ",
                    shape_str(grad_loss_in.sizes()));
  const at::Tensor grad_loss = grad_loss_in.contiguous();
  const int64_t N = grad.size(0), V = grad.size(1), ld = row_stride(grad),
                step = grad_loss.dim() == 0 ? 0 : 1;
  if (grad.numel() == 0) return;
  CE_DISPATCH(grad.scalar_type(), "cross_entropy_scale_", [&] {
    if (grad.is_cpu()) {
      at::parallel_for(0, N, grain_rows(V), [&](int64_t begin, int64_t end) {
        cross_entropy_scale_cpu(grad.data_ptr<scalar_t>(), ld, grad_loss.data_ptr<scalar_t>(), step, begin,
                                end, V);
      });
      return;
    }
#ifdef WITH_CUDA
    const OnDevice on(grad);
    cross_entropy_scale_cuda(cuda_ptr<scalar_t>(grad), ld, cuda_ptr<scalar_t>(grad_loss), step == 1, N, V,
                             on.stream);
#endif
  });
}

// The schemas, and the functions above as the CPU and CUDA kernels (common/library.h: define() lets a rebuilt
// op load again into the same process).
COURSE_LIBRARY(m) {
  define(
      m,
      "cross_entropy(Tensor logits, Tensor target, int ignore_index, float label_smoothing, int reduction) "
      "-> (Tensor, Tensor)");
  define(
      m,
      "cross_entropy_backward(Tensor grad_loss, Tensor logits, Tensor target, Tensor lse, int ignore_index, "
      "float label_smoothing, int reduction) -> Tensor");
  define(m,
         "cross_entropy_inplace_(Tensor(a!) logits, Tensor target, int ignore_index, float label_smoothing, "
         "int reduction) -> Tensor");
  define(m, "cross_entropy_scale_(Tensor(a!) grad, Tensor grad_loss) -> ()");
}

COURSE_IMPL_CPU_CUDA(m) {
  m.impl("cross_entropy", &cross_entropy_kernel);
  m.impl("cross_entropy_backward", &cross_entropy_backward_kernel);
  m.impl("cross_entropy_inplace_", &cross_entropy_inplace_kernel);
  m.impl("cross_entropy_scale_", &cross_entropy_scale_kernel);
}

namespace {

// The ops that write an argument move its version counter, as a native in-place op does: a backward that
// saved the values they overwrite (logits = h.exp(): exp's backward needs them) then fails loudly instead of
// computing with the gradient written there. PyTorch's own ops do it at this dispatch key, between autograd
// and the kernels.
at::Tensor cross_entropy_inplace_or_view(at::Tensor& logits, const at::Tensor& target, int64_t ignore_index,
                                         double label_smoothing, int64_t reduction) {
  static const auto inplace =
      op<at::Tensor(at::Tensor&, const at::Tensor&, int64_t, double, int64_t)>("cross_entropy_inplace_");
  at::Tensor loss;
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    loss = inplace.call(logits, target, ignore_index, label_smoothing, reduction);
  }
  torch::autograd::impl::bump_version(logits);
  return loss;
}

void cross_entropy_scale_or_view(at::Tensor& grad, const at::Tensor& grad_loss) {
  static const auto scale = op<void(at::Tensor&, const at::Tensor&)>("cross_entropy_scale_");
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    scale.call(grad, grad_loss);
  }
  torch::autograd::impl::bump_version(grad);
}

}  // namespace

TORCH_LIBRARY_IMPL(course, ADInplaceOrView, m) {
  m.impl("cross_entropy_inplace_", &cross_entropy_inplace_or_view);
  m.impl("cross_entropy_scale_", &cross_entropy_scale_or_view);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() =
      "course::cross_entropy and its backward, in-place and scale ops (torch.ops.course.*): loading "
      "registers them";
}
