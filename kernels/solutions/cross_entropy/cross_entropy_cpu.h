// cross_entropy_cpu.h: the CPU loops of cross_entropy.cpu.cpp, as cross_entropy.cpp sees them. Plain C++ on
// raw pointers (no torch headers: an edit recompiles that small file alone). Each handles rows [begin, end)
// of the [N, V] logits, row r at x + r * ld; cross_entropy.cpp splits the rows over threads
// (at::parallel_for). T is float, double, c10::Half or c10::BFloat16; the math (cross_entropy_math.h) runs in
// CeAcc<T>: double for double, float for the others.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>

template <typename T>
using CeAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// lse[r] and loss[r] (unreduced, in CeAcc<T>) of rows [begin, end): loss 0 where target[r] == ignore_index,
// NaN where the target is outside [0, V) (the glue refuses such targets on the CPU before this runs).
template <typename T>
void cross_entropy_forward_cpu(const T* x, int64_t ld, const int64_t* target, CeAcc<T>* loss, CeAcc<T>* lse,
                               int64_t begin, int64_t end, int64_t V, int64_t ignore_index, double eps);

// grad row r (at grad + r * ld_grad) = d loss_r / d x_r * scale * grad_loss[r * grad_loss_step] (grad_loss
// null: 1), from x and lse, for rows [begin, end); 0 where target[r] == ignore_index. grad may be x itself
// (the in-place path, ld_grad == ld): each value is read before it is written.
template <typename T>
void cross_entropy_backward_cpu(const T* x, int64_t ld, T* grad, int64_t ld_grad, const int64_t* target,
                                const CeAcc<T>* lse, const T* grad_loss, int64_t grad_loss_step, double scale,
                                int64_t begin, int64_t end, int64_t V, int64_t ignore_index, double eps);

// grad row r *= grad_loss[r * grad_loss_step], rows [begin, end); a factor of exactly 1 leaves the row alone.
template <typename T>
void cross_entropy_scale_cpu(T* grad, int64_t ld, const T* grad_loss, int64_t grad_loss_step, int64_t begin,
                             int64_t end, int64_t V);
