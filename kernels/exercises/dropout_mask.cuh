// Exercise (lesson 05): the dropout mask of 4 neighbouring elements, from a counter-based generator.
//
// Dropout zeroes each element with probability p and scales the others by 1 / (1 - p), so that the
// expected value of every element stays what it was. The course's dropout never stores its mask: element
// i's fate is a pure function of (seed, offset, i), so backward recomputes it (kernels/common/philox.cuh says
// how). One Philox call gives 4 random 32-bit words, one for each element of a group of 4: elements
// 4 * group .. 4 * group + 3.
//
// Your function decides the 4 elements of one group and writes their outputs; it is the same code on the
// CPU and on the GPU (PHILOX_HD: __host__ __device__), so both give the same bits. About 4 lines.
// From kernels/common/philox.cuh you need:
//   philox::draw4(seed, offset, group) -> philox::Words4 r   the 4 words r.v[0..3] of this group and call
//   philox::drop_threshold(p) -> uint64_t                    round(p * 2^32)
//   philox::keeps(word, threshold) -> bool                   keep the element whose word this is
// Hint: an element that is dropped is 0 whatever x is; write it as a choice (kept ? x * scale : 0), not as
// a product with the mask: at p = 1, scale = 1 / (1 - p) is inf, and 0 * inf is NaN.
// Check your work with the self-check cell in lesson 05.
//
// This file is compiled only by kernels/dropout_mask/dropout_mask.exercises.cpp (the CPU loop) and
// kernels/dropout_mask/dropout_mask.exercises.cu (the kernel, one thread per group): an edit rebuilds in
// seconds.
#pragma once

#include <cstdint>

#include "common/philox.cuh"

// x[0..4): the group's 4 values (past the end of the tensor: 0), in the math type acc_t (float or double).
// Write y[0..4): x[k] / (1 - p) where element k is kept, 0 where it is dropped. The call's random stream is
// (seed, offset): offset moves on by 4 from one dropout call to the next, so each call draws a new mask.
template <typename acc_t>
PHILOX_HD void dropout_group4(const acc_t (&x)[4], acc_t (&y)[4], uint64_t seed, uint64_t offset,
                              uint64_t group, double p) {
  // TODO(exercise): your code here (the solution is 4 lines).
}
