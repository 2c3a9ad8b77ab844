// kernels/layernorm/layernorm_choices.h: which kernel runs forward v3 and backward v2 (lesson 03), by name.
// Plain C++ (no CUDA, no torch): layernorm.cpp maps Python's `kernel="..."` to these in CPU builds too, and
// the .cu files take them. kAuto is what lesson 03 runs: the ladder's fastest measured on the GPU at hand
// (the op, course::layer_norm, runs it or the norm engine: layernorm.route.cu). The others exist to be
// compared (benchmarks/tuning/layernorm.py, notebook 03b); every one gives the same results up to rounding,
// and a choice that does not apply to a call runs the next simpler one.
#pragma once

#include <utility>

// Forward v3 (layernorm.cu; the pipelined kernel is in layernorm.hopper.cu).
enum class ForwardKernel {
  kAuto,       // kPipelined on sm_90+ for half/bf16 where the grid does at most 4 rounds, else kRegisters
  kRegisters,  // forward_v3_kernel: one row per row group, loaded straight into registers
  kPipelined,  // forward_v3_pipelined_kernel: a persistent grid, the next row copied to shared memory by
               // cp.async while this one is reduced (half/bf16; kRegisters for float and double)
};

// Backward v2 (the row loop is in layernorm.cu; the one-kernel endings are in layernorm.hopper.cu).
enum class BackwardKernel {
  kAuto,         // kBulkCopySplitBarrier for half/bf16 on sm_90+, else kCooperative, else kTwoKernels
  kTwoKernels,   // backward_v2_kernel writes per-block partial column sums, sum_partials_kernel adds them
  kCooperative,  // backward_v2_cooperative_kernel: the same rows, the column sums finished in the same
                 // kernel after a grid-wide barrier (cooperative launch; float, half, bf16)
  kBulkCopy,     // backward_v2_bulk_kernel: rows brought into shared memory by TMA bulk copies, three rounds
                 // in flight per SM (sm_90+; else kCooperative)
  kBulkCopySplitBarrier,  // kBulkCopy whose last round arrives at the grid barrier before its grad_x
};

// The names Python uses, in the order the enums list them.
inline constexpr std::pair<ForwardKernel, const char*> kForwardKernelNames[] = {
    {ForwardKernel::kAuto, "auto"},
    {ForwardKernel::kRegisters, "registers"},
    {ForwardKernel::kPipelined, "pipelined"},
};
inline constexpr std::pair<BackwardKernel, const char*> kBackwardKernelNames[] = {
    {BackwardKernel::kAuto, "auto"},
    {BackwardKernel::kTwoKernels, "two_kernels"},
    {BackwardKernel::kCooperative, "cooperative"},
    {BackwardKernel::kBulkCopy, "bulk_copy"},
    {BackwardKernel::kBulkCopySplitBarrier, "bulk_copy_split_barrier"},
};
