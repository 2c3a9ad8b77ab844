// Exercise (lesson 05): float16 in an op's dispatch, summed in float.
//
// The op: the mean of the squares of each row, sum(x[j]^2) / n (RMSNorm's statistic), returned as float32
// (float64 for float64 rows). Its dispatch (Part 1) maps x's dtype to two types: T, what an element is
// stored as, and A, what the row is summed in. float32, float64 and bfloat16 are there; add float16, stored
// as Half and summed in float (about 3 lines). Part 2 sums the squares of a row's elements in A (about 6
// lines): convert each element to A before squaring it.
//
// Why float: float16 keeps 11 significant bits and its largest value is 65504. A float16 running sum of
// 4096 ones stops at 2048 (2048 + 1 rounds back to 2048, the spacing of float16 numbers there is 2), and the
// square of 300 is already inf. In float (24 bits, up to 3.4e38) neither happens. The self-check shows you
// both if you sum in T.
// Check your work with the self-check cell in lesson 05.
//
// This file is compiled only by kernels/half_dispatch/half_dispatch.exercises.cpp (the CPU loop) and
// half_dispatch.exercises.cu (one warp per row): the same two functions on the CPU and on the GPU.
#pragma once

#include <cstdint>

#include "half_dispatch/half_dispatch.h"        // DType
#include "half_dispatch/half_dispatch_types.h"  // Half, BFloat16 (16-bit types usable on both sides), HALF_HD

// Part 1: call body(T{}, A{}) with the two types of `dtype` and return true; return false for a dtype
// without a case (the op then says which dtype is not dispatched).
template <typename Body>
bool dispatch(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::Float32:
      body(float{}, float{});
      return true;
    case DType::Float64:
      body(double{}, double{});
      return true;
    case DType::BFloat16:
      body(BFloat16{}, float{});  // stored in 16 bits, summed in float
      return true;
    // TODO(exercise): your code here (the solution is 3 lines).
    default:
      return false;
  }
}

// Part 2: *sum = x[j] * x[j] summed in A over j = first, first + step, first + 2 * step, ... below n. On the
// CPU a row is one call (first = 0, step = 1); on the GPU lane l of a warp takes first = l, step = 32.
// static_cast<A>(x[j]) converts an element (Half and BFloat16 convert to float).
template <typename T, typename A>
HALF_HD void sum_squares(const T* x, int64_t n, int64_t first, int64_t step, A* sum) {
  // TODO(exercise): your code here (the solution is 6 lines).
}
