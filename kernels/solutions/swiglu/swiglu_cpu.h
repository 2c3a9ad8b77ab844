// swiglu_cpu.h: the CPU loops of swiglu.cpu.cpp, as swiglu.cpp sees them. Plain C++ on raw pointers (no torch
// headers, so an edit recompiles that small file alone). Each handles rows [begin, end) of the [rows, 2h]
// input: swiglu.cpp splits the rows over threads (at::parallel_for). T is float, double, c10::Half or
// c10::BFloat16; the math runs in SwigluAcc<T>: double for double, float for the others.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>

template <typename T>
using SwigluAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void swiglu_forward_cpu(const T* x, T* y, int64_t begin, int64_t end, int64_t h);

template <typename T>
void swiglu_backward_cpu(const T* grad_y, const T* x, T* grad_x, int64_t begin, int64_t end, int64_t h);
