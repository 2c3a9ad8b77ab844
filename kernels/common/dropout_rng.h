// kernels/common/dropout_rng.h: the PyTorch side of a counter-based dropout mask, for any op's .cpp that
// applies one (course::dropout in dropout.cpp; a fused norm + dropout). Its kernels include
// kernels/common/philox.cuh.
//
//   check_dropout_p(p)                       0 <= p <= 1, else ValueError "p (the probability ...) ...,
//   got 1.5" check_generator(generator, x)            None, or a generator on x's device ("cuda" = the
//   current GPU) draw_rng_state(generator, x) -> philox::RngState
//                                            the (seed, offset) to draw the mask of one call with, from
//                                            `generator` or the default generator of x's device, as native
//                                            dropout takes them: on a GPU philox_cuda_state(kOffsetPerCall)
//                                            under the generator's mutex (inside a CUDA graph capture two
//                                            device pointers that each replay refreshes), on the CPU a 64-bit
//                                            seed drawn from the CPU generator and offset 0
//   saved_rng_state(rng_state) -> philox::RngState
//                                            backward's view of the int64 [2] (seed, offset) tensor that the
//                                            forward kernel wrote: pointers, read where the kernel runs
//   check_rng_state(rng_state, "rng_state", grad_y, "grad_y")   int64 [2] on grad_y's device
//
// A forward kernel unpacks the RngState (philox::unpack), writes the seed and offset it read into the
// rng_state it returns (block 0, thread 0), and decides element i with philox::keep / keep_bits4 (flat
// index i of the output); the backward kernel gets saved_rng_state(that tensor) and decides the same way.
#pragma once

#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include "checks.h"
#include "philox.cuh"

#ifdef WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

inline void check_dropout_p(double p) {
  char text[32];  // "%g": 1.5, -0.1, nan (std::to_string says 1.500000; checks.h says why not an ostream)
  std::snprintf(text, sizeof text, "%g", p);
  TORCH_CHECK_VALUE(p >= 0 && p <= 1,
                    "p (the probability of zeroing an element) must be between 0 and 1, got ", text);
}

inline void check_generator(const std::optional<at::Generator>& generator, const at::Tensor& x) {
  if (!generator.has_value() || !generator->defined()) return;
  const c10::Device device = generator->device();  // torch.Generator("cuda") has no index: the current GPU's
  TORCH_CHECK(device.type() == x.device().type() && (!device.has_index() || device == x.device()),
              "generator must be on the device of x (", x.device().str(), "), got ", device.str());
}

inline philox::RngState draw_rng_state(const std::optional<at::Generator>& generator, const at::Tensor& x) {
  philox::RngState rng;
#ifdef WITH_CUDA
  if (x.is_cuda()) {
    auto* gen = at::get_generator_or_default<at::CUDAGeneratorImpl>(
        generator, at::cuda::detail::getDefaultCUDAGenerator(x.device().index()));
    at::PhiloxCudaState s;
    {
      std::lock_guard<std::mutex> lock(gen->mutex_);
      s = gen->philox_cuda_state(philox::kOffsetPerCall);
    }
    rng.captured = s.captured_;
    if (s.captured_) {
      rng.seed_ptr = s.seed_.ptr;
      rng.offset_ptr = s.offset_.ptr;
      rng.offset_intragraph = s.offset_intragraph_;
    } else {
      rng.seed = s.seed_.val;
      rng.offset = s.offset_.val;
    }
    return rng;
  }
#endif
  auto* gen =
      at::get_generator_or_default<at::CPUGeneratorImpl>(generator, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(gen->mutex_);
  rng.seed = gen->random64();
  return rng;
}

inline void check_rng_state(const at::Tensor& rng_state, const char* name, const at::Tensor& like,
                            const char* like_name) {
  check_defined(rng_state, name);
  check_same_device(rng_state, name, like, like_name);
  TORCH_CHECK_TYPE(rng_state.scalar_type() == at::kLong, name,
                   " must be int64 (the seed and offset that course::dropout returned), got ",
                   rng_state.scalar_type());
  check_shape(rng_state, name, {2});
}

// `rng_state` must stay alive (and contiguous: it is [2]) while the kernel that reads it runs.
inline philox::RngState saved_rng_state(const at::Tensor& rng_state) {
  philox::RngState rng;
  rng.captured = true;  // read through the pointers: device memory on a GPU, host memory on the CPU
  rng.seed_ptr = rng_state.data_ptr<int64_t>();
  rng.offset_ptr = rng_state.data_ptr<int64_t>() + 1;
  return rng;
}
