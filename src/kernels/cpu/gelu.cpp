#include "kernels/cpu/gelu.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;
}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, size_t n) {
  const T s = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kCubic);
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const T x = inp[i];
      const T t = detail::vtanh<T>(s * (x + a * x * x * x));
      out[i] = T(0.5) * x * (T(1) + t);
    }
  });
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const T s = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kCubic);
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const T x = inp[i];
      const T t = detail::vtanh<T>(s * (x + a * x * x * x));
      const T dtanh = s * (T(1) + T(3) * a * x * x) * (T(1) - t * t);
      dinp[i] = dout[i] * (T(0.5) * (T(1) + t) + T(0.5) * x * dtanh);
    }
  });
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);

}  // namespace tessera::kernels
