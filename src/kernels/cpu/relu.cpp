#include "kernels/cpu/relu.h"

#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

// A NaN input gives NaN, as in PyTorch: `x > 0 ? x : 0` alone would turn it into 0 and hide a
// diverged run from the loss that should show it.
template <class T>
void relu_forward(T* out, const T* inp, size_t n) {
  using F = compute_t<T>;
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const F x = load(inp[i]);
      out[i] = store<T>(x > F(0) || x != x ? x : F(0));
    }
  });
}

template <class T>
void relu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  using F = compute_t<T>;
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const F x = load(inp[i]);
      dinp[i] = store<T>(x > F(0) ? load(dout[i]) : F(0));
    }
  });
}

template <class T>
void relu2_forward(T* out, const T* inp, size_t n) {
  using F = compute_t<T>;
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const F x = load(inp[i]);
      const F r = x > F(0) || x != x ? x : F(0);
      out[i] = store<T>(r * r);
    }
  });
}

template <class T>
void relu2_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  using F = compute_t<T>;
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const F x = load(inp[i]);
      dinp[i] = store<T>(x > F(0) ? F(2) * x * load(dout[i]) : F(0));
    }
  });
}

template void relu_forward<float>(float*, const float*, size_t);
template void relu_forward<double>(double*, const double*, size_t);
template void relu_backward<float>(float*, const float*, const float*, size_t);
template void relu_backward<double>(double*, const double*, const double*, size_t);
template void relu_forward<bf16>(bf16*, const bf16*, size_t);
template void relu_forward<f16>(f16*, const f16*, size_t);
template void relu_backward<bf16>(bf16*, const bf16*, const bf16*, size_t);
template void relu_backward<f16>(f16*, const f16*, const f16*, size_t);
template void relu2_forward<float>(float*, const float*, size_t);
template void relu2_forward<double>(double*, const double*, size_t);
template void relu2_backward<float>(float*, const float*, const float*, size_t);
template void relu2_backward<double>(double*, const double*, const double*, size_t);
template void relu2_forward<bf16>(bf16*, const bf16*, size_t);
template void relu2_forward<f16>(f16*, const f16*, size_t);
template void relu2_backward<bf16>(bf16*, const bf16*, const bf16*, size_t);
template void relu2_backward<f16>(f16*, const f16*, const f16*, size_t);

}  // namespace tessera::kernels
