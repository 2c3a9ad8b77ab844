// batchnorm_relu_math.h: the math of BatchNorm + ReLU on one value or one channel, in A (float, or double for
// float64 tensors), for the CPU loops (batchnorm_relu.cpu.cpp) and the CUDA kernels (batchnorm_relu.cu)
// alike.
//
// Forward, per channel c over its M = N * H * W values:
//   mean = sum(x) / M,  var = sum((x - mean)^2) / M (biased),  rstd = 1 / sqrt(var + eps)
//   y = relu((x - mean) * rstd * weight + bias)
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)   (unbiased, as
//   nn.BatchNorm2d)
// Backward, with g = grad_y * (y > 0) and xhat = (x - mean) * rstd:
//   grad_bias = sum(g),  grad_weight = sum(g * xhat)
//   grad_x = weight * rstd * (g - grad_bias / M - xhat * grad_weight / M)
//
// The statistics are Welford states (count, mean, m2 = sum of squared deviations from the mean), never a sum
// and a sum of squares: var = sum(x^2)/M - mean^2 subtracts two numbers of size mean^2, and in float a
// channel whose mean is 1000 times its spread loses every digit of var that way. A state takes one value at a
// time (welford_add) and two states merge into one (welford_merge, Chan et al.), which is how a thread's
// partial, a block's and the blocks' partials become the channel's.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define BN_HD __host__ __device__ __forceinline__
#else
#define BN_HD inline
#endif

template <typename A>
struct Welford {
  A n;     // values seen
  A mean;  // their mean
  A m2;    // sum of (value - mean)^2 over them
};

BN_HD float bn_sqrt(float v) {
#ifdef __CUDA_ARCH__
  return sqrtf(v);
#else
  return std::sqrt(v);
#endif
}
BN_HD double bn_sqrt(double v) {
#ifdef __CUDA_ARCH__
  return ::sqrt(v);
#else
  return std::sqrt(v);
#endif
}

// One value v into a slot (mean, m2) that has now seen n values, inv_n = 1 / n. Slots that take their values
// in lockstep (the 8 lanes of a CPU loop, the values of a thread's 16-byte Pack) share n, so one reciprocal
// serves them all: per value, a subtraction and two multiply-adds.
template <typename A>
BN_HD void welford_add(A& mean, A& m2, A v, A inv_n) {
  const A d = v - mean;
  mean += d * inv_n;
  m2 += d * (v - mean);
}

// Two states as one (Chan, Golub and LeVeque): the means weighted by their counts, and the m2s added with the
// spread between the two means. An empty state (n == 0) changes nothing.
template <typename A>
BN_HD Welford<A> welford_merge(const Welford<A>& a, const Welford<A>& b) {
  const A n = a.n + b.n;
  const A f = n > A(0) ? b.n / n : A(0);  // b's share of the merged state
  const A d = b.mean - a.mean;
  return {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
}

template <typename A>
BN_HD A bn_rstd(const Welford<A>& s, A eps) {
  return A(1) / bn_sqrt(s.m2 / s.n + eps);
}

// The running statistics' update of nn.BatchNorm2d in training: the unbiased variance, m2 / (n - 1).
template <typename A>
BN_HD void bn_update_running(A& running_mean, A& running_var, const Welford<A>& s, A momentum) {
  running_mean = (A(1) - momentum) * running_mean + momentum * s.mean;
  running_var = (A(1) - momentum) * running_var + momentum * (s.m2 / (s.n - A(1)));
}

// relu that keeps a NaN a NaN (as torch.relu does; v > 0 ? v : 0 would turn it into 0).
template <typename A>
BN_HD A bn_relu(A v) {
  return v < A(0) ? A(0) : v;
}

// y of one value, given its channel's mean and scale = rstd * weight.
template <typename A>
BN_HD A bn_forward(A x, A mean, A scale, A bias) {
  return bn_relu((x - mean) * scale + bias);
}

// The backward formula of one channel as grad_x = k * g + p * (x - mean) + q, once its two sums are known:
//   k = weight * rstd,  p = -k * rstd * sum(g * xhat) / M,  q = -k * sum(g) / M.
// (x - mean), not x: p * x + q' would cancel two terms of size |p * mean| where |mean| >> |x - mean|.
template <typename A>
struct BnGrad {
  A k, p, q;
};

template <typename A>
BN_HD BnGrad<A> bn_grad_coefficients(A weight, A rstd, A sum_g, A sum_g_xhat, A M) {
  BnGrad<A> c{A(0), A(0), A(0)};
  // TODO(exercise): your code here (the solution is 3 lines).
  return c;
}

// grad_x of one value: g = grad_y where y > 0, else 0 (the ReLU's mask, read from the saved y).
template <typename A>
BN_HD A bn_grad_x(A grad_y, A y, A x, A mean, const BnGrad<A>& c) {
  A gx = A(0);
  // TODO(exercise): your code here (the solution is 2 lines).
  return gx;
}
