#include "kernels/cpu/rmsnorm.h"

#include <cmath>
#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

template <class T>
void rmsnorm_forward(T* out, compute_t<T>* rstd, const T* inp, const T* weight, int N, int C, compute_t<T> eps) {
  using F = compute_t<T>;
  TS_CHECK(N >= 0 && C > 0, "rmsnorm_forward: bad shape N={} C={}", N, C);
  const size_t c_size = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(N) * c_size))
  for (int n = 0; n < N; ++n) {
    const T* x = inp + n * c_size;
    T* o = out + n * c_size;
    F sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += load(x[c]) * load(x[c]);
    const F rs = F(1) / std::sqrt(sq / static_cast<F>(C) + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = store<T>(load(x[c]) * rs * load(weight[c]));
    rstd[n] = rs;
  }
}

template <class T>
void rmsnorm_backward(T* dinp, compute_t<T>* dweight, const T* dout, const T* inp, const T* weight,
                      const compute_t<T>* rstd, int N, int C) {
  using F = compute_t<T>;
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
      const F rs = rstd[n];
      F gx_sum = 0;
#pragma omp simd reduction(+ : gx_sum)
      for (int c = 0; c < C; ++c) gx_sum += load(dy[c]) * load(weight[c]) * load(x[c]);
      const F gx_mean = gx_sum * rs / static_cast<F>(C);
#pragma omp simd
      for (int c = 0; c < C; ++c) dx[c] = store<T>(rs * (load(dy[c]) * load(weight[c]) - load(x[c]) * rs * gx_mean));
    }
  }
  if (dweight != nullptr) {
    detail::for_column_ranges(C, work, [&](int c0, int c1) {
      for (int n = 0; n < N; ++n) {
        const T* x = inp + n * c_size;
        const T* dy = dout + n * c_size;
        const F rs = rstd[n];
#pragma omp simd
        for (int c = c0; c < c1; ++c) dweight[c] += load(dy[c]) * load(x[c]) * rs;
      }
    });
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int, double);
template void rmsnorm_forward<bf16>(bf16*, float*, const bf16*, const bf16*, int, int, float);
template void rmsnorm_forward<f16>(f16*, float*, const f16*, const f16*, int, int, float);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*, const double*,
                                       int, int);
template void rmsnorm_backward<bf16>(bf16*, float*, const bf16*, const bf16*, const bf16*, const float*, int, int);
template void rmsnorm_backward<f16>(f16*, float*, const f16*, const f16*, const f16*, const float*, int, int);

}  // namespace tessera::kernels
