// kernels/common/rmsnorm_cpu.h: the CPU implementations of lesson 05's norms (RMSNorm, and the fused residual
// add
// + RMSNorm / LayerNorm of kernels/add_norm/add_norm.cpp), parallel over rows with at::parallel_for. No
// tensors: pointers in, as the CUDA launchers take them. T is x's type (float, double, at::Half,
// at::BFloat16), P the parameters' (T, or float beside a half/bf16 x), acc_t the math (float; double for
// double).
//
//   forward<kNorm>(x, residual, w, b, y, h, mean, rstd, M, N, eps)   residual nullptr: no add (h unused)
//   backward<kNorm>(dy, dh, x, mean, rstd, w, dx, dw, db, M, N)      dh nullptr: no gradient of h
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "blocked_sum.h"

namespace norm_cpu {

enum class Norm { kRms, kLayer };

// h = x + residual rounded to T (as an eager add rounds it), and the norm of the rounded h. RMSNorm: rstd =
// 1 / sqrt(mean(x^2) + eps); LayerNorm: the mean, then the mean of squared deviations (two passes).
template <Norm kNorm, typename T, typename P, typename acc_t>
void forward(const T* x, const T* res, const P* __restrict__ w, const P* __restrict__ b, T* __restrict__ y,
             T* __restrict__ h, acc_t* mean, acc_t* rstd, int64_t M, int64_t N, acc_t eps) {
  at::parallel_for(0, M, std::max<int64_t>(1, 32768 / N), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* in = x + r * N;
      if (res != nullptr) {
        T* __restrict__ hr = h + r * N;
        const T* __restrict__ xr = x + r * N, * __restrict__ rr = res + r * N;
        for (int64_t j = 0; j < N; ++j)
          hr[j] = static_cast<T>(static_cast<acc_t>(xr[j]) + static_cast<acc_t>(rr[j]));
        in = hr;
      }
      acc_t mu = 0;
      if constexpr (kNorm == Norm::kLayer)
        mu = blocked_sum<acc_t>(N, [&](int64_t j) { return static_cast<acc_t>(in[j]); }) / N;
      const acc_t sq = blocked_sum<acc_t>(N, [&](int64_t j) {
        const acc_t d = static_cast<acc_t>(in[j]) - mu;
        return d * d;
      });
      const acc_t rs = acc_t(1) / std::sqrt(sq / N + eps);
      T* __restrict__ yr = y + r * N;
      for (int64_t j = 0; j < N; ++j) {
        acc_t v = (static_cast<acc_t>(in[j]) - mu) * rs * static_cast<acc_t>(w[j]);
        if constexpr (kNorm == Norm::kLayer) v += static_cast<acc_t>(b[j]);
        yr[j] = static_cast<T>(v);
      }
      if constexpr (kNorm == Norm::kLayer) mean[r] = mu;
      rstd[r] = rs;
    }
  });
}

// grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)) + grad_h (no mean(g) for RMSNorm), g = dy * w; the
// column sums grad_w = sum(dy * xhat) and grad_b = sum(dy) per fixed chunk of rows, then the chunks added
// in order: the same result whatever the number of threads. dw and db may be nullptr (not wanted).
template <Norm kNorm, typename T, typename P, typename acc_t>
void backward(const T* dy, const T* dh, const T* x, const acc_t* mean, const acc_t* rstd, const P* w, T* dx,
              P* dw, P* db, int64_t M, int64_t N) {
  constexpr int K = kNorm == Norm::kLayer ? 2 : 1;
  const int64_t rows_per_chunk = std::max<int64_t>(64, (M + 63) / 64);
  const int64_t chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<acc_t> part(chunks * K * N, acc_t(0));
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t ch = cb; ch < ce; ++ch) {
      acc_t* __restrict__ pw = part.data() + ch * K * N;
      acc_t* __restrict__ pb = pw + N;
      for (int64_t r = ch * rows_per_chunk; r < std::min(M, (ch + 1) * rows_per_chunk); ++r) {
        const T* __restrict__ xr = x + r * N, * __restrict__ gr = dy + r * N;
        acc_t mu = 0;
        if constexpr (kNorm == Norm::kLayer) mu = mean[r];
        const acc_t rs = rstd[r];
        const auto g = [&](int64_t j) { return static_cast<acc_t>(gr[j]) * static_cast<acc_t>(w[j]); };
        const acc_t mgx =
            blocked_sum<acc_t>(N, [&](int64_t j) { return g(j) * (static_cast<acc_t>(xr[j]) - mu) * rs; }) /
            N;
        acc_t mg = 0;
        if constexpr (kNorm == Norm::kLayer) mg = blocked_sum<acc_t>(N, g) / N;
        T* __restrict__ dxr = dx + r * N;
        const T* __restrict__ hr = dh ? dh + r * N : nullptr;
        for (int64_t j = 0; j < N; ++j) {
          const acc_t d = static_cast<acc_t>(gr[j]), xh = (static_cast<acc_t>(xr[j]) - mu) * rs;
          acc_t v = rs * (d * static_cast<acc_t>(w[j]) - mg - xh * mgx);
          if (hr) v += static_cast<acc_t>(hr[j]);
          dxr[j] = static_cast<T>(v);
          pw[j] += d * xh;
          if constexpr (K == 2) pb[j] += d;
        }
      }
    }
  });
  if (dw == nullptr && db == nullptr) return;
  at::parallel_for(0, N, 4096, [&](int64_t jb, int64_t je) {
    for (int64_t j = jb; j < je; ++j) {
      acc_t sw = 0, sb = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        sw += part[ch * K * N + j];
        if constexpr (K == 2) sb += part[ch * K * N + N + j];
      }
      if (dw) dw[j] = static_cast<P>(sw);
      if (db) db[j] = static_cast<P>(sb);
    }
  });
}

}  // namespace norm_cpu
