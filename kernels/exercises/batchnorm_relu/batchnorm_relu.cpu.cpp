// batchnorm_relu.cpu.cpp: BatchNorm + ReLU on the CPU (batchnorm_relu_cpu.h), with the math of
// batchnorm_relu_math.h in BnAcc<T>. The statistics are Welford states: 8 slots in lockstep over blocks of
// 512 values (so a slot sees at most 64 values before its block is merged, and float's rounding stays that of
// 64 additions, not of M), the blocks and the channels-last partials merged in order, so the result does not
// depend on the number of threads.
#include <algorithm>

#include "batchnorm_relu_cpu.h"
#include "batchnorm_relu_math.h"

namespace {

constexpr int kLanes = 8;        // Welford slots (or partial sums) side by side: the compiler vectorizes them
constexpr int64_t kBlock = 512;  // values per block: kBlock / kLanes = 64 values per slot

// The Welford state of p[0 .. len).
template <typename A, typename T>
Welford<A> welford_run(const T* p, int64_t len) {
  Welford<A> total{A(0), A(0), A(0)};
  // TODO(exercise): your code here (the solution is 13 lines).
  return total;
}

// sum(g) and sum(g * (x - mean)) of one run, g = grad_y * (y > 0), added to sum_g and sum_gx.
template <typename A, typename T>
void backward_sums_run(const T* grad_y, const T* y, const T* x, int64_t len, A mean, A& sum_g, A& sum_gx) {
  // TODO(exercise): your code here (the solution is 17 lines).
}

}  // namespace

template <typename T>
void bn_stats_nchw_cpu(const T* x, int64_t N, int64_t C, int64_t HW, int64_t c_begin, int64_t c_end,
                       BnAcc<T>* mean, BnAcc<T>* m2) {
  using A = BnAcc<T>;
  for (int64_t c = c_begin; c < c_end; ++c) {
    Welford<A> s{A(0), A(0), A(0)};
    // TODO(exercise): your code here (the solution is 1 lines).
    mean[c] = s.mean;
    m2[c] = s.m2;
  }
}

template <typename T>
void bn_stats_cl_cpu(const T* x, int64_t C, int64_t r_begin, int64_t r_end, BnAcc<T>* mean, BnAcc<T>* m2) {
  using A = BnAcc<T>;
  std::fill(mean, mean + C, A(0));
  std::fill(m2, m2 + C, A(0));
  // TODO(exercise): your code here (the solution is 7 lines).
}

template <typename A>
void bn_merge_cpu(const A* part_mean, const A* part_m2, int64_t parts, int64_t rows, int64_t M, int64_t C,
                  int64_t c_begin, int64_t c_end, A* mean, A* m2) {
  std::fill(mean + c_begin, mean + c_end, A(0));
  std::fill(m2 + c_begin, m2 + c_end, A(0));
  // TODO(exercise): your code here (the solution is 11 lines).
}

template <typename A>
void bn_sum_partials_cpu(const A* part, int64_t parts, int64_t C, int64_t c_begin, int64_t c_end, A* sum) {
  std::fill(sum + c_begin, sum + c_end, A(0));
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t c = c_begin; c < c_end; ++c) sum[c] += part[p * C + c];
}

template <typename A>
void bn_finalize_cpu(const A* mean, const A* m2, int64_t M, int64_t C, A momentum, A eps, A* rstd,
                     A* running_mean, A* running_var) {
  for (int64_t c = 0; c < C; ++c) {
    const Welford<A> s{A(M), mean[c], m2[c]};
    rstd[c] = bn_rstd(s, eps);
    bn_update_running(running_mean[c], running_var[c], s, momentum);
  }
}

template <typename T>
void bn_apply_nchw_cpu(const T* x, T* y, const BnAcc<T>* mean, const BnAcc<T>* rstd, const BnAcc<T>* weight,
                       const BnAcc<T>* bias, int64_t C, int64_t HW, int64_t begin, int64_t end) {
  using A = BnAcc<T>;
  // TODO(exercise): your code here (the solution is 7 lines).
}

template <typename T>
void bn_apply_cl_cpu(const T* x, T* y, const BnAcc<T>* mean, const BnAcc<T>* rstd, const BnAcc<T>* weight,
                     const BnAcc<T>* bias, int64_t C, int64_t begin, int64_t end) {
  using A = BnAcc<T>;
  // TODO(exercise): your code here (the solution is 3 lines).
}

template <typename T>
void bn_backward_sums_nchw_cpu(const T* grad_y, const T* y, const T* x, const BnAcc<T>* mean, int64_t N,
                               int64_t C, int64_t HW, int64_t c_begin, int64_t c_end, BnAcc<T>* sum_g,
                               BnAcc<T>* sum_gx) {
  using A = BnAcc<T>;
  for (int64_t c = c_begin; c < c_end; ++c) {
    A sg = 0, sgx = 0;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t at = (n * C + c) * HW;
      backward_sums_run(grad_y + at, y + at, x + at, HW, mean[c], sg, sgx);
    }
    sum_g[c] = sg;
    sum_gx[c] = sgx;
  }
}

template <typename T>
void bn_backward_sums_cl_cpu(const T* grad_y, const T* y, const T* x, const BnAcc<T>* mean, int64_t C,
                             int64_t r_begin, int64_t r_end, BnAcc<T>* sum_g, BnAcc<T>* sum_gx) {
  using A = BnAcc<T>;
  std::fill(sum_g, sum_g + C, A(0));
  std::fill(sum_gx, sum_gx + C, A(0));
  // TODO(exercise): your code here (the solution is 7 lines).
}

template <typename A>
void bn_backward_finalize_cpu(const A* sum_g, const A* sum_gx, const A* weight, const A* rstd, int64_t M,
                              int64_t C, A* grad_weight, A* grad_bias, A* k, A* p, A* q) {
  for (int64_t c = 0; c < C; ++c) {
    grad_bias[c] = sum_g[c];
    grad_weight[c] = rstd[c] * sum_gx[c];
    const BnGrad<A> g = bn_grad_coefficients(weight[c], rstd[c], grad_bias[c], grad_weight[c], A(M));
    k[c] = g.k;
    p[c] = g.p;
    q[c] = g.q;
  }
}

template <typename T>
void bn_backward_apply_nchw_cpu(const T* grad_y, const T* y, const T* x, const BnAcc<T>* mean,
                                const BnAcc<T>* k, const BnAcc<T>* p, const BnAcc<T>* q, T* grad_x, int64_t C,
                                int64_t HW, int64_t begin, int64_t end) {
  using A = BnAcc<T>;
  for (int64_t run = begin; run < end; ++run) {
    const int64_t c = run % C;
    const BnGrad<A> coef{k[c], p[c], q[c]};
    for (int64_t i = run * HW; i < (run + 1) * HW; ++i)
      grad_x[i] = static_cast<T>(bn_grad_x(A(grad_y[i]), A(y[i]), A(x[i]), mean[c], coef));
  }
}

template <typename T>
void bn_backward_apply_cl_cpu(const T* grad_y, const T* y, const T* x, const BnAcc<T>* mean,
                              const BnAcc<T>* k, const BnAcc<T>* p, const BnAcc<T>* q, T* grad_x, int64_t C,
                              int64_t begin, int64_t end) {
  using A = BnAcc<T>;
  for (int64_t r = begin; r < end; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      grad_x[i] =
          static_cast<T>(bn_grad_x(A(grad_y[i]), A(y[i]), A(x[i]), mean[c], BnGrad<A>{k[c], p[c], q[c]}));
    }
}

#define INSTANTIATE_T(T)                                                                                    \
  template void bn_stats_nchw_cpu<T>(const T*, int64_t, int64_t, int64_t, int64_t, int64_t, BnAcc<T>*,      \
                                     BnAcc<T>*);                                                            \
  template void bn_stats_cl_cpu<T>(const T*, int64_t, int64_t, int64_t, BnAcc<T>*, BnAcc<T>*);              \
  template void bn_apply_nchw_cpu<T>(const T*, T*, const BnAcc<T>*, const BnAcc<T>*, const BnAcc<T>*,       \
                                     const BnAcc<T>*, int64_t, int64_t, int64_t, int64_t);                  \
  template void bn_apply_cl_cpu<T>(const T*, T*, const BnAcc<T>*, const BnAcc<T>*, const BnAcc<T>*,         \
                                   const BnAcc<T>*, int64_t, int64_t, int64_t);                             \
  template void bn_backward_sums_nchw_cpu<T>(const T*, const T*, const T*, const BnAcc<T>*, int64_t,        \
                                             int64_t, int64_t, int64_t, int64_t, BnAcc<T>*, BnAcc<T>*);     \
  template void bn_backward_sums_cl_cpu<T>(const T*, const T*, const T*, const BnAcc<T>*, int64_t, int64_t, \
                                           int64_t, BnAcc<T>*, BnAcc<T>*);                                  \
  template void bn_backward_apply_nchw_cpu<T>(const T*, const T*, const T*, const BnAcc<T>*,                \
                                              const BnAcc<T>*, const BnAcc<T>*, const BnAcc<T>*, T*,        \
                                              int64_t, int64_t, int64_t, int64_t);                          \
  template void bn_backward_apply_cl_cpu<T>(const T*, const T*, const T*, const BnAcc<T>*, const BnAcc<T>*, \
                                            const BnAcc<T>*, const BnAcc<T>*, T*, int64_t, int64_t,         \
                                            int64_t);
INSTANTIATE_T(float)
INSTANTIATE_T(double)
INSTANTIATE_T(c10::Half)
INSTANTIATE_T(c10::BFloat16)

#define INSTANTIATE_A(A)                                                                                  \
  template void bn_merge_cpu<A>(const A*, const A*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                A*, A*);                                                                  \
  template void bn_sum_partials_cpu<A>(const A*, int64_t, int64_t, int64_t, int64_t, A*);                 \
  template void bn_finalize_cpu<A>(const A*, const A*, int64_t, int64_t, A, A, A*, A*, A*);               \
  template void bn_backward_finalize_cpu<A>(const A*, const A*, const A*, const A*, int64_t, int64_t, A*, \
                                            A*, A*, A*, A*);
INSTANTIATE_A(float)
INSTANTIATE_A(double)
