// kernels/layernorm/layernorm.cpu.cpp: LayerNorm on the CPU (lesson 03), the loops
// kernels/layernorm/layernorm.cpp calls for a CPU tensor (declared in layernorm_cpu.h):
//
//   layernorm_forward_cpu<T, P, acc_t>    y, mean and rstd, row by row (at::parallel_for over rows)
//   layernorm_backward_cpu<T, P, acc_t>   grad_x row by row; grad_weight and grad_bias in a fixed order
//
// T is x's dtype, P the parameters' (T, or float for a float16/bfloat16 x), acc_t the math's (float, double
// for double). A file of their own, like PyTorch's aten/src/ATen/native/cpu/: the loops are most of what the
// compiler optimizes in the glue, and the loader compiles an op's files in parallel. It includes no pybind11
// and no autograd; `exercise` runs the exercises' CPU parts (forward v2's row statistics, backward v1's
// grad_x), compiled in layernorm.exercises.cpp.
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/blocked_sum.h"
#include "layernorm_cpu.h"

namespace {

// Two passes over the row: the mean, then the mean of squared deviations (see the exercise header), each
// a blocked_sum (kernels/common/blocked_sum.h).
template <typename T, typename acc_t>
void row_stats(const T* x, int64_t n, acc_t eps, acc_t* mean, acc_t* rstd) {
  const acc_t mu = blocked_sum<acc_t>(n, [&](int64_t j) { return static_cast<acc_t>(x[j]); }) / n;
  const acc_t sq = blocked_sum<acc_t>(n, [&](int64_t j) {
    const acc_t d = static_cast<acc_t>(x[j]) - mu;
    return d * d;
  });
  *mean = mu;
  *rstd = acc_t(1) / std::sqrt(sq / n + eps);
}

// The element-wise loops take __restrict__ pointers: told that the output does not alias the inputs, the
// compiler vectorizes them. P, the parameters' type, is T, or float for a float16/bfloat16 x (mixed).
template <typename T, typename P, typename acc_t>
void normalize_row(const T* __restrict__ x, const P* __restrict__ w, const P* __restrict__ b, acc_t mu,
                   acc_t rs, T* __restrict__ y, int64_t N) {
  for (int64_t j = 0; j < N; ++j)
    y[j] = static_cast<T>((static_cast<acc_t>(x[j]) - mu) * rs * static_cast<acc_t>(w[j]) +
                          static_cast<acc_t>(b[j]));
}

template <typename T, typename P, typename acc_t>
void backward_row(const T* __restrict__ x, const T* __restrict__ dy, const P* __restrict__ w, acc_t mu,
                  acc_t rs, acc_t mg, acc_t mgx, T* __restrict__ dx, acc_t* __restrict__ pw,
                  acc_t* __restrict__ pb, int64_t N) {
  for (int64_t j = 0; j < N; ++j) {
    const acc_t d = static_cast<acc_t>(dy[j]), xh = (static_cast<acc_t>(x[j]) - mu) * rs;
    dx[j] = static_cast<T>(rs * (d * static_cast<acc_t>(w[j]) - mg - xh * mgx));
    pw[j] += d * xh;
    pb[j] += d;
  }
}

// The exercises' CPU parts take float or double: a float16 or bfloat16 row goes through float (`buf`), as
// the math does anyway.
template <typename T, typename acc_t>
const acc_t* as_acc(const T* p, int64_t n, std::vector<acc_t>& buf) {
  if constexpr (std::is_same_v<T, acc_t>) {
    return p;
  } else {
    buf.assign(p, p + n);
    return buf.data();
  }
}

// grad_x of one row by the exercise (layernorm_backward_row.cuh, Part 1), and the row's share of the
// column sums of grad_weight and grad_bias.
template <typename T, typename acc_t>
void backward_row_exercise(const T* x, const T* dy, const acc_t* w, acc_t mu, acc_t rs, T* dx, acc_t* pw,
                           acc_t* pb, int64_t N, std::vector<acc_t> (&buf)[3]) {
  const acc_t *xa = as_acc(x, N, buf[0]), *ga = as_acc(dy, N, buf[1]);
  if constexpr (std::is_same_v<T, acc_t>) {
    layernorm_exercise_backward_row(ga, xa, w, mu, rs, N, dx);
  } else {
    buf[2].assign(N, std::numeric_limits<acc_t>::quiet_NaN());  // what an unfinished exercise leaves
    layernorm_exercise_backward_row(ga, xa, w, mu, rs, N, buf[2].data());
    for (int64_t j = 0; j < N; ++j) dx[j] = static_cast<T>(buf[2][j]);
  }
  for (int64_t j = 0; j < N; ++j) {
    pw[j] += ga[j] * (xa[j] - mu) * rs;
    pb[j] += ga[j];
  }
}

}  // namespace

template <typename T, typename P, typename acc_t>
void layernorm_forward_cpu(const T* x, const P* w, const P* b, T* y, acc_t* mean, acc_t* rstd, int64_t M,
                           int64_t N, acc_t eps, bool exercise) {
  at::parallel_for(0, M, std::max<int64_t>(1, 32768 / N), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> buf;
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * N;
      mean[r] = rstd[r] = std::numeric_limits<acc_t>::quiet_NaN();  // what an unfinished exercise leaves
      if (exercise)
        layernorm_exercise_row_stats(as_acc(xr, N, buf), N, eps, mean + r, rstd + r);
      else
        row_stats(xr, N, eps, mean + r, rstd + r);
      normalize_row(xr, w, b, mean[r], rstd[r], y + r * N, N);
    }
  });
}

// grad_x row by row; grad_weight and grad_bias (each nullptr when not wanted) summed per fixed chunk of
// rows, then the chunks added in order: the same result whatever the number of threads. `exercise`:
// grad_x by the exercise (backward v1).
template <typename T, typename P, typename acc_t>
void layernorm_backward_cpu(const T* dy, const T* x, const acc_t* mean, const acc_t* rstd, const P* w, T* dx,
                            P* dw, P* db, int64_t M, int64_t N, bool exercise) {
  const int64_t rows_per_chunk = std::max<int64_t>(64, (M + 63) / 64);
  const int64_t chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<acc_t> part(chunks * 2 * N, acc_t(0));
  std::vector<acc_t> w_buf;
  const acc_t* wa = exercise ? as_acc(w, N, w_buf) : nullptr;
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    std::vector<acc_t> buf[3];
    for (int64_t ch = cb; ch < ce; ++ch) {
      acc_t* pw = part.data() + ch * 2 * N;
      acc_t* pb = pw + N;
      for (int64_t r = ch * rows_per_chunk; r < std::min(M, (ch + 1) * rows_per_chunk); ++r) {
        const T *xr = x + r * N, *gr = dy + r * N;
        const acc_t mu = mean[r], rs = rstd[r];
        if (exercise) {
          backward_row_exercise(xr, gr, wa, mu, rs, dx + r * N, pw, pb, N, buf);
          continue;
        }
        auto g = [&](int64_t j) { return static_cast<acc_t>(gr[j]) * static_cast<acc_t>(w[j]); };
        const acc_t mg = blocked_sum<acc_t>(N, g) / N;
        const acc_t mgx =
            blocked_sum<acc_t>(N, [&](int64_t j) { return g(j) * (static_cast<acc_t>(xr[j]) - mu) * rs; }) /
            N;
        backward_row(xr, gr, w, mu, rs, mg, mgx, dx + r * N, pw, pb, N);
      }
    }
  });
  if (dw == nullptr && db == nullptr) return;
  at::parallel_for(0, N, 4096, [&](int64_t jb, int64_t je) {
    for (int64_t j = jb; j < je; ++j) {
      acc_t sw = 0, sb = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        sw += part[ch * 2 * N + j];
        sb += part[ch * 2 * N + N + j];
      }
      if (dw) dw[j] = static_cast<P>(sw);
      if (db) db[j] = static_cast<P>(sb);
    }
  });
}

// The (T, P) pairs layernorm.cpp dispatches to.
#define LAYERNORM_CPU_INSTANTIATE(T, P, acc_t)                                                       \
  template void layernorm_forward_cpu<T, P, acc_t>(const T*, const P*, const P*, T*, acc_t*, acc_t*, \
                                                   int64_t, int64_t, acc_t, bool);                   \
  template void layernorm_backward_cpu<T, P, acc_t>(const T*, const T*, const acc_t*, const acc_t*,  \
                                                    const P*, T*, P*, P*, int64_t, int64_t, bool);
LAYERNORM_CPU_INSTANTIATE(float, float, float)
LAYERNORM_CPU_INSTANTIATE(double, double, double)
LAYERNORM_CPU_INSTANTIATE(c10::Half, c10::Half, float)
LAYERNORM_CPU_INSTANTIATE(c10::Half, float, float)
LAYERNORM_CPU_INSTANTIATE(c10::BFloat16, c10::BFloat16, float)
LAYERNORM_CPU_INSTANTIATE(c10::BFloat16, float, float)
