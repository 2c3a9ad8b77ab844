// kernels/common/library.h: registering the course's ops with torch.library from C++ (lesson 04), so that
// torch.ops.course.<op> works, torch.compile sees the op, and autograd runs without Python.
//
//   COURSE_LIBRARY(m) { define(m, "polynomial(Tensor x, Tensor coeffs) -> Tensor"); }  the schemas
//   TORCH_LIBRARY_IMPL(course, CPU, m) { m.impl("polynomial", &forward); }          the kernels, as usual
//   COURSE_IMPL_CPU_CUDA(m) { m.impl("square", &square_kernel); }   the same kernels for CPU and CUDA, once
//   op<Signature>("polynomial").call(x, coeffs)   call an op through the dispatcher (an autograd
//                                                 Function's forward/backward, below the Autograd key)
//
// Why not TORCH_LIBRARY(course, m)? It may appear once per namespace in a process, and every op lives in
// the one namespace "course"; so each op's file adds a fragment. And a notebook rebuilds an op after an
// edit and loads the new .so into the same process: a second m.def of the same schema throws while the
// library loads, where nothing can catch it, and the Jupyter kernel dies (pytorch#80865). define() skips
// a schema that an earlier build of the op already defined; the new build's TORCH_LIBRARY_IMPL kernels
// then replace the old ones (PyTorch warns once, "Overriding a previously registered kernel"), so the
// edited kernel is the one torch.ops calls. A changed schema needs a restart: define() says so.
//
// The Autograd kernel: lesson 02's `torch::autograd::Function<T>` (polynomial, fused_bias_relu, ...), or a
// backward node written by hand (kernels/layernorm/layernorm.autograd.cpp's LayerNormBackward), which is what
// Function<T>::apply builds, without its generic parts (a context with a string-keyed map, per-input and
// per-output records, output wrapping for views and in-place writes that a fresh output does not need):
//   if (torch::autograd::compute_requires_grad(x, weight)) {       grad mode on, some input requires grad
//     auto node = std::shared_ptr<MyBackward>(new MyBackward(), torch::autograd::deleteNode);
//     node->set_next_edges(torch::autograd::collect_next_edges(x, weight));  one edge per input, in order
//     node->x = torch::autograd::SavedVariable(x, false);          saved: checked for in-place changes
//     torch::autograd::set_history(y, node);                      y's grad_fn
//   }
// and MyBackward::apply(grads) returns one gradient per edge (should_compute_output(i): whether edge i wants
// one). For course::layer_norm that makes the first build ~1 s shorter at -O1 (3 s at -O3) than with
// Function<T>, and the eager step's CPU time about native's instead of ~9 % above it. What it does not do
// (forward-mode AD), check_no_forward_ad() below refuses, as Function<T> does.
#pragma once

#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <vector>

#define COURSE_NAMESPACE "course"
#define COURSE_LIBRARY(m) TORCH_LIBRARY_FRAGMENT(course, m)

// COURSE_IMPL_CPU_CUDA(m) { m.impl("square", &square_kernel); ... }: an op whose kernels take CPU and CUDA
// tensors alike registers the same list under both dispatch keys. This macro writes the list once and expands
// to the two blocks lesson 04 reads in kernels/polynomial/polynomial.cpp,
//   TORCH_LIBRARY_IMPL(course, CPU, m) { course_cpu_cuda_kernels(m); }
//   TORCH_LIBRARY_IMPL(course, CUDA, m) { course_cpu_cuda_kernels(m); }   in a build with CUDA only
// where course_cpu_cuda_kernels is the function whose body follows the macro (so, once per .cpp file). An op
// whose devices take different kernels writes its blocks out.
#define COURSE_IMPL_CPU_CUDA(m)                                      \
  static void course_cpu_cuda_kernels(torch::Library& m);            \
  TORCH_LIBRARY_IMPL(course, CPU, m) { course_cpu_cuda_kernels(m); } \
  COURSE_IMPL_ON_CUDA(m)                                             \
  static void course_cpu_cuda_kernels(torch::Library& m)
#ifdef WITH_CUDA
#define COURSE_IMPL_ON_CUDA(m) \
  TORCH_LIBRARY_IMPL(course, CUDA, m) { course_cpu_cuda_kernels(m); }
#else
#define COURSE_IMPL_ON_CUDA(m)
#endif

// m.def(schema, tags) unless this process already has the op (from an earlier build of the same op). tags:
// e.g. {at::Tag::nondeterministic_seeded} for a random op (kernels/dropout/dropout.cpp).
inline void define(torch::Library& m, const char* schema, const std::vector<at::Tag>& tags = {}) {
  const std::string text(schema);
  const std::string name = std::string(COURSE_NAMESPACE "::") + text.substr(0, text.find('('));
  const auto existing = c10::Dispatcher::singleton().findSchema({name, ""});
  if (!existing) {
    m.def(schema, tags);
    return;
  }
  const std::string now = c10::toString(existing->schema());
  const std::string full = std::string(COURSE_NAMESPACE "::") + text;
  if (now != c10::toString(torch::schema(full.c_str())))  // we cannot throw here: we are inside dlopen
    TORCH_WARN(name, "'s schema changed since it was first loaded in this process (was ", now, ", now ",
               schema, "): restart the Python process (Jupyter: Kernel > Restart) to use the new one");
}

// Native type promotion for a registered op that takes two floating tensors of different dtypes, as
// torch.relu(x * scale + bias) does (bfloat16 x and a float32 bias give float32): floating_pair says whether
// they differ, promoted() is the wider dtype both go to. Anything else (an integer tensor) is left to the
// op's own checks.
inline bool floating_pair(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.scalar_type() != b.scalar_type() &&
         at::isFloatingType(a.scalar_type()) && at::isFloatingType(b.scalar_type());
}
inline at::ScalarType promoted(const at::Tensor& a, const at::Tensor& b) {
  return c10::promoteTypes(a.scalar_type(), b.scalar_type());
}

// The op `name` of the course namespace as a typed handle: op<at::Tensor(const at::Tensor&)>("square").
template <typename Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow((std::string(COURSE_NAMESPACE "::") + name).c_str(), "")
      .typed<Signature>();
}

// What an autograd Function's backward returns: the gradients, and when the backward is itself being
// recorded (create_graph=True, for a second derivative), the gradients attached to a node whose own
// backward raises, naming the op. Without it a second derivative through our backward kernel (which
// autograd does not see into) would be silently zero, as it is with Python's @once_differentiable.
// The node must reach every tensor a second derivative can be taken with respect to: the forward's inputs
// (the edges of the node autograd is running, this Function's, lead to them, whether or not anything
// saved does) and `grad_outputs`, the gradients backward received.
struct NoDoubleBackwardNode : torch::autograd::Node {
  NoDoubleBackwardNode(const char* op_name, torch::autograd::edge_list&& edges)
      : Node(std::move(edges)), op_name(op_name) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&&) override {
    TORCH_CHECK(false, "course::", op_name,
                " has no double backward: its backward kernel is not differentiable (a second derivative, "
                "e.g. gradgradcheck or create_graph=True then grad again, is not supported)");
    return {};
  }
  const char* op_name;
};

inline torch::autograd::variable_list once_differentiable(
    const char* op_name, torch::autograd::variable_list grads,
    const torch::autograd::variable_list& grad_outputs) {
  if (!at::GradMode::is_enabled()) return grads;
  const auto running = torch::autograd::get_current_node();
  torch::autograd::edge_list edges = running ? running->next_edges() : torch::autograd::edge_list();
  for (const auto& g : grad_outputs)
    if (g.defined()) edges.push_back(torch::autograd::impl::gradient_edge(g));
  if (std::none_of(edges.begin(), edges.end(), [](const auto& e) { return e.is_valid(); })) return grads;
  const auto node = std::shared_ptr<NoDoubleBackwardNode>(new NoDoubleBackwardNode(op_name, std::move(edges)),
                                                          torch::autograd::deleteNode);
  for (const auto& g : grads)
    if (g.defined()) torch::autograd::set_history(g, node);
  return grads;
}

// Forward-mode AD (torch.func.jvp, torch.autograd.forward_ad): the course's ops have no forward derivative,
// so an input carrying a tangent is an error that names the op, not an output silently without its tangent.
inline bool has_tangent(const at::Tensor& t) { return t.defined() && t._fw_grad(/*level=*/0).defined(); }
inline bool has_tangent(const std::optional<at::Tensor>& t) { return t.has_value() && has_tangent(*t); }
template <typename... Tensors>
void check_no_forward_ad(const char* op_name, const Tensors&... inputs) {
  TORCH_CHECK(!(has_tangent(inputs) || ...), "course::", op_name,
              " has no forward-mode derivative (jvp): use reverse mode (backward, torch.autograd.grad)");
}
