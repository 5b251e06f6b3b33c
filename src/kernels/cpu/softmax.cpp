#include "kernels/cpu/softmax.h"

#include <cstddef>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

template <class T>
void softmax_forward(T* out, const T* inp, int N, int C) {
  TS_CHECK(N >= 0 && C > 0, "softmax_forward: bad shape N={} C={}", N, C);
  const size_t c_size = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(N) * c_size))
  for (int n = 0; n < N; ++n) {
    const T* x = inp + n * c_size;
    T* o = out + n * c_size;
    T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < C; ++c) mx = x[c] > mx ? x[c] : mx;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) {
      const T e = detail::vexp<T>(x[c] - mx);
      o[c] = e;
      sum += e;
    }
    const T inv = T(1) / sum;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] *= inv;
  }
}

template <class T>
void softmax_backward(T* dinp, const T* dout, const T* out, int N, int C) {
  TS_CHECK(N >= 0 && C > 0, "softmax_backward: bad shape N={} C={}", N, C);
  const size_t c_size = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(N) * c_size))
  for (int n = 0; n < N; ++n) {
    const T* y = out + n * c_size;
    const T* dy = dout + n * c_size;
    T* dx = dinp + n * c_size;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; ++c) dot += dy[c] * y[c];
#pragma omp simd
    for (int c = 0; c < C; ++c) dx[c] = y[c] * (dy[c] - dot);
  }
}

template void softmax_forward<float>(float*, const float*, int, int);
template void softmax_forward<double>(double*, const double*, int, int);
template void softmax_backward<float>(float*, const float*, const float*, int, int);
template void softmax_backward<double>(double*, const double*, const double*, int, int);

}  // namespace tessera::kernels
