// cross_entropy_math.h: softmax cross-entropy's math on one row, in A (float, or double for float64 logits),
// for the CPU loops (cross_entropy.cpu.cpp) and the CUDA kernels (cross_entropy.cu) alike.
//
// A row x of V logits, its target t, label smoothing eps:
//   lse    = log sum_j exp(x_j)                                  the row's log-sum-exp
//   loss   = (1 - eps) * (lse - x_t) + eps * (lse - mean_j x_j)  (eps = 0: -log softmax(x)_t)
//   d loss / d x_j = softmax(x)_j - (1 - eps) * [j == t] - eps / V,   softmax(x)_j = exp(x_j - lse)
//
// The row is read once for lse, without a softmax tensor: a running max m, the sum s of exp(x_j - m) over the
// values seen so far, rescaled by exp(m_old - m_new) when the max grows (the "online softmax"), and the sum
// of the values for the smoothing term. Then lse = m + log s. Every exp has an argument <= 0, so nothing
// overflows at logits of 1e4 or bfloat16's 3e38 (exp(1e4) is inf in float, exp(88.8) already is).
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define CE_HD __host__ __device__ __forceinline__
#else
#define CE_HD inline
#endif

// The reduction argument of the ops, as the schema's int carries it (F.cross_entropy's names in Python).
constexpr int64_t kReduceNone = 0, kReduceMean = 1, kReduceSum = 2;

// exp(v), for v <= 0 (or -inf: 0). On the GPU one ex2.approx instruction (relative error 2^-22) on v *
// log2(e): the row's one exp per value is most of the kernels' arithmetic.
CE_HD float ce_exp(float v) {
#ifdef __CUDA_ARCH__
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v * 1.4426950408889634f));
  return r;
#else
  return std::exp(v);
#endif
}
CE_HD double ce_exp(double v) {
#ifdef __CUDA_ARCH__
  return ::exp(v);
#else
  return std::exp(v);
#endif
}
CE_HD float ce_log(float v) {
#ifdef __CUDA_ARCH__
  return logf(v);
#else
  return std::log(v);
#endif
}
CE_HD double ce_log(double v) {
#ifdef __CUDA_ARCH__
  return ::log(v);
#else
  return std::log(v);
#endif
}

// The larger of a and b, one instruction on the GPU (a NaN is passed over; the exp of it still poisons the
// sum).
CE_HD float ce_max(float a, float b) { return fmaxf(a, b); }
CE_HD double ce_max(double a, double b) { return fmax(a, b); }

template <typename A>
CE_HD A ce_neg_inf() {
  return -A(INFINITY);
}

// K values of the row into the running (m, s, sx): m the largest value so far, s = sum of exp(value - m),
// sx = sum of the values. One rescale of s for the K values, then one exp each. A value of -inf (a masked
// logit) adds nothing; a row that is -inf so far keeps s = 0 (exp(-inf - -inf) would be NaN).
template <typename A, int K>
CE_HD void ce_add(const A (&v)[K], A& m, A& s, A& sx) {
  // TODO(exercise): your code here (the solution is 14 lines).
}

template <typename A>
CE_HD void ce_add(A x, A& m, A& s, A& sx) {
  const A v[1] = {x};
  ce_add(v, m, s, sx);
}

// Two partial (m, s, sx) of one row, over different values, into the first: the threads' partials in a block.
// Symmetric to the bit (each sum and max is), so the lanes of a butterfly all end with the same result.
template <typename A>
CE_HD void ce_merge(A& m, A& s, A& sx, A m2, A s2, A sx2) {
  // TODO(exercise): your code here (the solution is 5 lines).
}

// The row's loss from its (m, s, sx), its target's logit xt, the smoothing eps and V. lse - xt is written
// (m - xt) + log s: m - xt is exact where xt is near m, so a loss of 0.3 from logits of 1e4 keeps float's
// digits, where lse - xt would lose three of them (lse is 1e4 to within float's 1e-3). Without smoothing the
// mean of x is left out, not multiplied by 0: a masked logit (-inf) makes it -inf, and 0 * inf is NaN.
template <typename A>
CE_HD A ce_loss(A m, A s, A sx, A xt, A eps, int64_t V) {
  A loss = 0;
  // TODO(exercise): your code here (the solution is 3 lines).
  return loss;
}

// d loss / d x_j times `scale` (the loss's gradient, over the rows counted for a mean), from x_j and the
// row's lse: softmax(x)_j = exp(x_j - lse), no softmax tensor. `uniform` is eps / V; the target's value also
// loses 1 - eps, before the result is rounded to the logits' dtype (softmax_t - 1 cancels to a few bits in
// bfloat16).
template <typename A>
CE_HD A ce_grad(A x, A lse, bool is_target, A eps, A uniform, A scale) {
  A g = 0;
  // TODO(exercise): your code here (the solution is 1 lines).
  return g;
}
