#include "kernels/cpu/rmsnorm.h"

#include <cmath>
#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, T eps) {
  TS_CHECK(N >= 0 && C > 0, "rmsnorm_forward: bad shape N={} C={}", N, C);
  const size_t c_size = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(N) * c_size))
  for (int n = 0; n < N; ++n) {
    const T* x = inp + n * c_size;
    T* o = out + n * c_size;
    T sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += x[c] * x[c];
    const T rs = T(1) / std::sqrt(sq / static_cast<T>(C) + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = x[c] * rs * weight[c];
    rstd[n] = rs;
  }
}

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C) {
  TS_CHECK(N >= 0 && C > 0, "rmsnorm_backward: bad shape N={} C={}", N, C);
  const size_t c_size = static_cast<size_t>(C);
  const size_t work = static_cast<size_t>(N) * c_size;
  if (dinp != nullptr) {
    // dinp = rstd * (g - xhat * mean(g * xhat)) with g = dout * weight, xhat = inp * rstd.
#pragma omp parallel for schedule(static) if (detail::worth_parallel(work))
    for (int n = 0; n < N; ++n) {
      const T* x = inp + n * c_size;
      const T* dy = dout + n * c_size;
      T* dx = dinp + n * c_size;
      const T rs = rstd[n];
      T gx_sum = 0;
#pragma omp simd reduction(+ : gx_sum)
      for (int c = 0; c < C; ++c) gx_sum += dy[c] * weight[c] * x[c];
      const T gx_mean = gx_sum * rs / static_cast<T>(C);
#pragma omp simd
      for (int c = 0; c < C; ++c) dx[c] = rs * (dy[c] * weight[c] - x[c] * rs * gx_mean);
    }
  }
  if (dweight != nullptr) {
    detail::for_column_ranges(C, work, [&](int c0, int c1) {
      for (int n = 0; n < N; ++n) {
        const T* x = inp + n * c_size;
        const T* dy = dout + n * c_size;
        const T rs = rstd[n];
#pragma omp simd
        for (int c = c0; c < c1; ++c) dweight[c] += dy[c] * x[c] * rs;
      }
    });
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*, const double*,
                                       int, int);

}  // namespace tessera::kernels
