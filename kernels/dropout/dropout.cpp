// kernels/dropout/dropout.cpp: the PyTorch side of dropout with a counter-based generator (lesson 05).
//
//   forward(x, p=0.5, train=True, version=2) -> [y, rng_state]   course::dropout, choosing the CUDA kernel
//   backward(grad_y, rng_state, p, version=2) -> grad_x          course::dropout_backward, choosing it
//   keep_mask(seed, offset, numel, p) -> bool [numel]            element by element with philox::keep on the
//                                                                CPU: the mask every kernel must reproduce
//   philox4x32(counter[4], key[2]) -> [4 words]                  the raw generator, for known answers
//
// The ops (torch.library, namespace course, kernels/common/library.h):
//   course::dropout(x, p, train, generator=None) -> (y, rng_state)
//       y = x * 1 / (1 - p) where an element is kept, 0 where it is dropped (each with probability p);
//       rng_state: int64 [2] on x's device, the (seed, offset) the mask came from. Differentiable in x
//       (Autograd kernel: DropoutFunction below, which saves rng_state, 16 bytes, instead of a mask).
//       Tagged nondeterministic_seeded, as native dropout is, so that compilers never merge two calls.
//   course::dropout_backward(grad_y, rng_state, p) -> grad_x       the same mask, recomputed from rng_state
// helpers/ops/dropout.py registers their fake kernels and has the public dropout() and nn.Module.
//
// Where (seed, offset) come from (kernels/common/dropout_rng.h, for any op that applies such a mask), as
// native dropout takes them: on a GPU from the CUDA generator (the default one of x's device, or
// `generator`): philox_cuda_state(4) under the generator's mutex. Outside a CUDA graph capture that is two
// numbers, and the generator's offset moves on by 4; inside one it is two device pointers the graph refreshes
// before every replay (so each replay draws a new mask), and the kernel writes the values it read into
// rng_state, which is how backward, captured in the same graph, finds them. On the CPU, the seed is a 64-bit
// draw from the CPU generator, offset 0. torch.manual_seed reproduces both. p = 0 (or train=False) copies x
// and p = 1 writes zeros, drawing nothing (like native dropout); an empty x draws nothing either. Those calls
// return rng_state [0, 0]. A dropped element is 0 whatever its value (native multiplies by 0, so a dropped
// inf or NaN stays NaN there).
//
// x is any float32/float64/float16/bfloat16 tensor (non-contiguous is copied first); the mask is over the
// elements in row-major order, so it does not depend on the layout. Math in float32 (float64 for float64).
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the Python module

#include <algorithm>
#include <string>
#include <vector>

#include "common/checks.h"
#include "common/dropout_rng.h"  // check_dropout_p, check_generator, draw_rng_state, check_rng_state, saved_rng_state
#include "common/library.h"
#include "common/philox.cuh"

#ifdef WITH_CUDA
#include "dropout.h"  // the launchers
#endif

namespace {

constexpr int64_t kDefaultVersion = 2;
constexpr int64_t kGrainGroups = 8192;  // groups of 4 elements per CPU task

void check_x(const at::Tensor& x, const char* name) {
  check_floating(x, name);
  check_cuda_built(x, name);
}

// ------------------------------------------------------------------------------------------------
// CPU implementation: the same bits as the CUDA kernels, one Philox call per group of 4 elements.
// ------------------------------------------------------------------------------------------------

template <typename T, typename acc_t>
void dropout_cpu(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, uint64_t threshold,
                 acc_t scale) {
  at::parallel_for(0, (n + 3) / 4, kGrainGroups, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const uint32_t bits = philox::keep_bits4(seed, offset, g, threshold);
      for (int64_t i = 4 * g; i < std::min(n, 4 * g + 4); ++i)
        y[i] = (bits >> (i % 4)) & 1u ? static_cast<T>(static_cast<acc_t>(x[i]) * scale) : T(0);
    }
  });
}

// y = dropout of x with the mask of `rng`; writes the (seed, offset) used into state (may be undefined).
void apply_mask(const at::Tensor& x, at::Tensor& y, const philox::RngState& rng, double p, at::Tensor* state,
                int64_t version) {
  const uint64_t threshold = philox::drop_threshold(p);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dropout", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t scale = acc_t(1) / (acc_t(1) - acc_t(p));
    if (x.is_cpu()) {
      uint64_t seed, offset;
      philox::unpack(rng, seed, offset);  // on the CPU the pointers (backward's rng_state) are host memory
      dropout_cpu(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel(), seed, offset, threshold, scale);
      if (state) {
        state->data_ptr<int64_t>()[0] = static_cast<int64_t>(seed);
        state->data_ptr<int64_t>()[1] = static_cast<int64_t>(offset);
      }
      return;
    }
#ifdef WITH_CUDA
    const OnDevice on(x);
    int64_t* out = state ? state->data_ptr<int64_t>() : nullptr;
    auto launcher = version == 1 ? dropout_v1<typename CudaType<scalar_t>::type>
                                 : dropout_v2<typename CudaType<scalar_t>::type>;
    launcher(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(y), x.numel(), rng, threshold, scale, out, on.stream);
#endif
  });
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// The registered kernels (CPU and CUDA) and lesson 05's binding
// ------------------------------------------------------------------------------------------------

std::vector<at::Tensor> forward(const at::Tensor& x, double p, bool train, int64_t version,
                                const std::optional<at::Generator>& generator) {
  check_x(x, "x");
  check_dropout_p(p);
  check_version(version, 2);
  check_generator(generator, x);
  const at::Tensor xc = x.contiguous();
  const auto state_options = x.options().dtype(at::kLong);
  if (!train || p == 0 || x.numel() == 0) return {xc.clone(), at::zeros({2}, state_options)};
  if (p == 1) return {at::zeros_like(xc), at::zeros({2}, state_options)};
  at::Tensor y = at::empty_like(xc), state = at::empty({2}, state_options);  // the kernel writes both
  apply_mask(xc, y, draw_rng_state(generator, x), p, &state, version);
  return {y, state};
}

at::Tensor backward(const at::Tensor& grad_y, const at::Tensor& rng_state, double p, int64_t version) {
  check_x(grad_y, "grad_y");
  check_dropout_p(p);
  check_version(version, 2);
  check_rng_state(rng_state, "rng_state", grad_y, "grad_y");
  const at::Tensor gc = grad_y.contiguous();
  if (p == 0 || gc.numel() == 0) return gc.clone();
  if (p == 1) return at::zeros_like(gc);
  at::Tensor grad_x = at::empty_like(gc);
  const at::Tensor st = rng_state.contiguous();  // alive until the kernel has read it (stream order)
  apply_mask(gc, grad_x, saved_rng_state(st), p, nullptr, version);
  return grad_x;
}

at::Tensor keep_mask(int64_t seed, int64_t offset, int64_t numel, double p) {
  check_dropout_p(p);
  TORCH_CHECK_VALUE(numel >= 0, "numel must be >= 0, got ", std::to_string(numel));
  at::Tensor mask = at::empty({numel}, at::kBool);
  bool* m = mask.data_ptr<bool>();
  const uint64_t threshold = philox::drop_threshold(p);
  for (int64_t i = 0; i < numel; ++i)
    m[i] = philox::keep(uint64_t(seed), uint64_t(offset), uint64_t(i), threshold);
  return mask;
}

std::vector<int64_t> philox4x32(const std::vector<int64_t>& counter, const std::vector<int64_t>& key) {
  TORCH_CHECK_VALUE(counter.size() == 4 && key.size() == 2, "counter must have 4 words and key 2, got ",
                    std::to_string(counter.size()), " and ", std::to_string(key.size()));
  philox::Words4 c;
  for (int k = 0; k < 4; ++k) c.v[k] = static_cast<uint32_t>(counter[k]);
  const philox::Words4 r =
      philox::philox4x32_10(c, static_cast<uint32_t>(key[0]), static_cast<uint32_t>(key[1]));
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

namespace {

std::tuple<at::Tensor, at::Tensor> dropout_kernel(const at::Tensor& x, double p, bool train,
                                                  std::optional<at::Generator> generator) {
  auto out = forward(x, p, train, kDefaultVersion, generator);
  return {out[0], out[1]};
}

at::Tensor dropout_backward_kernel(const at::Tensor& grad_y, const at::Tensor& rng_state, double p) {
  return backward(grad_y, rng_state, p, kDefaultVersion);
}

const auto& dropout_op() {
  static const auto handle = op<decltype(dropout_kernel)>("dropout");
  return handle;
}
const auto& backward_op() {
  static const auto handle = op<decltype(dropout_backward_kernel)>("dropout_backward");
  return handle;
}

}  // namespace

// The op as a C++ autograd Function: forward keeps rng_state (16 bytes) where native dropout keeps a
// 1-byte-per-element mask; backward recomputes the mask from it. rng_state is an output too (not
// differentiable): the kernel wrote it, so in a captured graph it holds each replay's own (seed, offset).
class DropoutFunction : public torch::autograd::Function<DropoutFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                double p, bool train,
                                                std::optional<at::Generator> generator) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, state] = dropout_op().call(x, p, train, generator);
    ctx->saved_data["p"] = train ? p : 0.0;  // eval mode: backward passes the gradient through
    ctx->save_for_backward({state});
    ctx->mark_non_differentiable({state});
    return {y, state};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor state = ctx->get_saved_variables()[0];
    at::Tensor grad_x;
    {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      grad_x = backward_op().call(grad_outputs[0], state, ctx->saved_data["p"].toDouble());
    }
    return once_differentiable("dropout", {grad_x, {}, {}, {}}, {grad_outputs[0]});
  }
};

namespace {

std::tuple<at::Tensor, at::Tensor> dropout_autograd(const at::Tensor& x, double p, bool train,
                                                    std::optional<at::Generator> generator) {
  if (!(at::GradMode::is_enabled() && x.defined() && x.requires_grad())) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return dropout_op().call(x, p, train, generator);
  }
  auto out = DropoutFunction::apply(x, p, train, generator);
  return {out[0], out[1]};
}

}  // namespace

COURSE_LIBRARY(m) {
  define(m, "dropout(Tensor x, float p, bool train, Generator? generator=None) -> (Tensor, Tensor)",
         {at::Tag::nondeterministic_seeded});
  define(m, "dropout_backward(Tensor grad_y, Tensor rng_state, float p) -> Tensor");
}
COURSE_IMPL_CPU_CUDA(m) {
  m.impl("dropout", &dropout_kernel);
  m.impl("dropout_backward", &dropout_backward_kernel);
}
TORCH_LIBRARY_IMPL(course, Autograd, m) { m.impl("dropout", &dropout_autograd); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "dropout with a counter-based generator: the mask recomputed in backward (lesson 05)";
  m.def(
      "forward",
      [](const at::Tensor& x, double p, bool train, int64_t version) {
        return forward(x, p, train, version, std::nullopt);
      },
      "[y, rng_state]: y = x / (1 - p) where kept, else 0; rng_state the (seed, offset) drawn", py::arg("x"),
      py::arg("p") = 0.5, py::arg("train") = true, py::arg("version") = kDefaultVersion);
  m.def("backward", &backward, "grad_x: grad_y through the mask of rng_state", py::arg("grad_y"),
        py::arg("rng_state"), py::arg("p"), py::arg("version") = kDefaultVersion);
  m.def("keep_mask", &keep_mask, "bool [numel]: philox::keep(seed, offset, i, drop_threshold(p)) for each i",
        py::arg("seed"), py::arg("offset"), py::arg("numel"), py::arg("p"));
  m.def("philox4x32", &philox4x32, "Philox4x32-10 of a counter (4 words) and a key (2 words)",
        py::arg("counter"), py::arg("key"));
}
