#include "kernels/cpu/swiglu.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, size_t n) {
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const T g = gate[i];
      out[i] = g * detail::vsigmoid<T>(g) * up[i];
    }
  });
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n) {
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const T g = gate[i];
      const T sig = detail::vsigmoid<T>(g);
      const T dy = dout[i];
      // silu'(g) = sig + g * sig * (1 - sig)
      dgate[i] = dy * up[i] * sig * (T(1) + g * (T(1) - sig));
      dup[i] = dy * g * sig;
    }
  });
}

template void swiglu_forward<float>(float*, const float*, const float*, size_t);
template void swiglu_forward<double>(double*, const double*, const double*, size_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, size_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*, size_t);

}  // namespace tessera::kernels
