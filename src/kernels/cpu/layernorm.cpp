#include "kernels/cpu/layernorm.h"

#include <cmath>
#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

template <class T>
void layernorm_forward(T* out, compute_t<T>* mean, compute_t<T>* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C, compute_t<T> eps) {
  using F = compute_t<T>;
  TS_CHECK(N >= 0 && C > 0, "layernorm_forward: bad shape N={} C={}", N, C);
  const size_t c_size = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(N) * c_size))
  for (int n = 0; n < N; ++n) {
    const T* x = inp + n * c_size;
    T* o = out + n * c_size;
    // Two passes over a row that sits in L1: the variance of centered values does not lose the
    // digits that E[x^2] - E[x]^2 would.
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += load(x[c]);
    const F m = sum / static_cast<F>(C);
    F var = 0;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) var += (load(x[c]) - m) * (load(x[c]) - m);
    const F rs = F(1) / std::sqrt(var / static_cast<F>(C) + eps);
    if (bias != nullptr) {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = store<T>((load(x[c]) - m) * rs * load(weight[c]) + load(bias[c]));
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = store<T>((load(x[c]) - m) * rs * load(weight[c]));
    }
    mean[n] = m;
    rstd[n] = rs;
  }
}

template <class T>
void layernorm_backward(T* dinp, compute_t<T>* dweight, compute_t<T>* dbias, const T* dout, const T* inp,
                        const T* weight, const compute_t<T>* mean, const compute_t<T>* rstd, int N, int C) {
  using F = compute_t<T>;
  TS_CHECK(N >= 0 && C > 0, "layernorm_backward: bad shape N={} C={}", N, C);
  const size_t c_size = static_cast<size_t>(C);
  const size_t work = static_cast<size_t>(N) * c_size;
  if (dinp != nullptr) {
    // dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, xhat the normalized input.
#pragma omp parallel for schedule(static) if (detail::worth_parallel(work))
    for (int n = 0; n < N; ++n) {
      const T* x = inp + n * c_size;
      const T* dy = dout + n * c_size;
      T* dx = dinp + n * c_size;
      const F m = mean[n], rs = rstd[n];
      F g_sum = 0, gx_sum = 0;
#pragma omp simd reduction(+ : g_sum, gx_sum)
      for (int c = 0; c < C; ++c) {
        const F g = load(dy[c]) * load(weight[c]);
        g_sum += g;
        gx_sum += g * (load(x[c]) - m) * rs;
      }
      const F g_mean = g_sum / static_cast<F>(C), gx_mean = gx_sum / static_cast<F>(C);
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        dx[c] = store<T>(rs * (load(dy[c]) * load(weight[c]) - g_mean - (load(x[c]) - m) * rs * gx_mean));
      }
    }
  }
  if (dweight != nullptr || dbias != nullptr) {
    // Parameter gradients are sums over rows: each thread owns a range of columns (see
    // for_column_ranges), which keeps them free of races and of partial buffers.
    detail::for_column_ranges(C, work, [&](int c0, int c1) {
      for (int n = 0; n < N; ++n) {
        const T* x = inp + n * c_size;
        const T* dy = dout + n * c_size;
        const F m = mean[n], rs = rstd[n];
        if (dweight != nullptr) {
#pragma omp simd
          for (int c = c0; c < c1; ++c) dweight[c] += load(dy[c]) * (load(x[c]) - m) * rs;
        }
        if (dbias != nullptr) {
#pragma omp simd
          for (int c = c0; c < c1; ++c) dbias[c] += load(dy[c]);
        }
      }
    });
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int, int,
                                       float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int,
                                        int, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, int, int);
template void layernorm_forward<bf16>(bf16*, float*, float*, const bf16*, const bf16*, const bf16*, int, int, float);
template void layernorm_forward<f16>(f16*, float*, float*, const f16*, const f16*, const f16*, int, int, float);
template void layernorm_backward<bf16>(bf16*, float*, float*, const bf16*, const bf16*, const bf16*, const float*,
                                       const float*, int, int);
template void layernorm_backward<f16>(f16*, float*, float*, const f16*, const f16*, const f16*, const float*,
                                      const float*, int, int);

}  // namespace tessera::kernels
