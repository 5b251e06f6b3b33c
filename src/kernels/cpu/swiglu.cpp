#include "kernels/cpu/swiglu.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, size_t n) {
  using F = compute_t<T>;
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const F g = load(gate[i]);
      out[i] = store<T>(g * detail::vsigmoid<F>(g) * load(up[i]));
    }
  });
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n) {
  using F = compute_t<T>;
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const F g = load(gate[i]);
      const detail::SigmoidPair<F> sg = detail::vsigmoid_pair<F>(g);
      const F dy = load(dout[i]);
      // silu'(g) = σ (1 + g (1 - σ)), with 1 - σ from vsigmoid_pair: as a difference it would
      // have no correct digit left for large g.
      dgate[i] = store<T>(dy * load(up[i]) * sg.s * (F(1) + g * sg.c));
      dup[i] = store<T>(dy * g * sg.s);
    }
  });
}

template void swiglu_forward<float>(float*, const float*, const float*, size_t);
template void swiglu_forward<double>(double*, const double*, const double*, size_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, size_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*, size_t);
template void swiglu_forward<bf16>(bf16*, const bf16*, const bf16*, size_t);
template void swiglu_forward<f16>(f16*, const f16*, const f16*, size_t);
template void swiglu_backward<bf16>(bf16*, bf16*, const bf16*, const bf16*, const bf16*, size_t);
template void swiglu_backward<f16>(f16*, f16*, const f16*, const f16*, const f16*, size_t);

}  // namespace tessera::kernels
