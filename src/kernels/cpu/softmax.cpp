#include "kernels/cpu/softmax.h"

#include <cstddef>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

template <class T>
void softmax_forward(T* out, const T* inp, int N, int C) {
  using F = compute_t<T>;
  TS_CHECK(N >= 0 && C > 0, "softmax_forward: bad shape N={} C={}", N, C);
  const size_t c_size = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(N) * c_size))
  for (int n = 0; n < N; ++n) {
    const T* x = inp + n * c_size;
    T* o = out + n * c_size;
    F mx = -std::numeric_limits<F>::infinity();
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < C; ++c) mx = load(x[c]) > mx ? load(x[c]) : mx;
    // The sum in double: in float its error grows with the terms per vector lane, which differ
    // with the CPU's vector width, and every output of the row carries it (cross_entropy.cpp).
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) {
      const F e = detail::vexp<F>(load(x[c]) - mx);
      if constexpr (!is_half_v<T>) o[c] = e;
      sum += static_cast<double>(e);
    }
    const F inv = static_cast<F>(1.0 / sum);
    if constexpr (is_half_v<T>) {
      // The exponentials again rather than stored: in 16 bits each output would be rounded twice.
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = store<T>(detail::vexp<F>(load(x[c]) - mx) * inv);
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] *= inv;
    }
  }
}

template <class T>
void softmax_backward(T* dinp, const T* dout, const T* out, int N, int C) {
  using F = compute_t<T>;
  TS_CHECK(N >= 0 && C > 0, "softmax_backward: bad shape N={} C={}", N, C);
  const size_t c_size = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(N) * c_size))
  for (int n = 0; n < N; ++n) {
    const T* y = out + n * c_size;
    const T* dy = dout + n * c_size;
    T* dx = dinp + n * c_size;
    F dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; ++c) dot += load(dy[c]) * load(y[c]);
#pragma omp simd
    for (int c = 0; c < C; ++c) dx[c] = store<T>(load(y[c]) * (load(dy[c]) - dot));
  }
}

template void softmax_forward<float>(float*, const float*, int, int);
template void softmax_forward<double>(double*, const double*, int, int);
template void softmax_forward<bf16>(bf16*, const bf16*, int, int);
template void softmax_forward<f16>(f16*, const f16*, int, int);
template void softmax_backward<float>(float*, const float*, const float*, int, int);
template void softmax_backward<double>(double*, const double*, const double*, int, int);
template void softmax_backward<bf16>(bf16*, const bf16*, const bf16*, int, int);
template void softmax_backward<f16>(f16*, const f16*, const f16*, int, int);

}  // namespace tessera::kernels
