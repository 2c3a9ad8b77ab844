// masked_softmax_cpu.h: the CPU loops of masked_softmax.cpu.cpp, as masked_softmax.cpp sees them. Plain C++
// on raw pointers (no torch headers, so an edit recompiles that small file alone). Each handles rows [begin,
// end) of the [rows, Lk] scores: masked_softmax.cpp splits the rows over threads (at::parallel_for). T is
// float, double, c10::Half or c10::BFloat16; the math runs in SoftmaxAcc<T>: double for double, float for the
// others.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>

#include "masked_softmax_rows.h"

template <typename T>
using SoftmaxAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// y = softmax(scale * x + mask) over each row's kept keys: 0 at a masked key, zeros across a row with none.
template <typename T>
void masked_softmax_forward_cpu(const T* x, T* y, const SoftmaxRows& s, double scale, int64_t begin,
                                int64_t end);

// grad_x = scale * y * (grad_y - sum_j grad_y[j] * y[j]) per row of Lk.
template <typename T>
void masked_softmax_backward_cpu(const T* grad_y, const T* y, T* grad_x, int64_t Lk, double scale,
                                 int64_t begin, int64_t end);
