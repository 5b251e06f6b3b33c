#include "kernels/cpu/residual.h"

#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

// Element i reads only index i of the inputs before writing index i of the output, so the loops
// stay correct when out aliases an input, and the simd pragma is still valid.
template <class T>
void add(T* out, const T* a, const T* b, size_t n) {
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) out[i] = store<T>(load(a[i]) + load(b[i]));
  });
}

template <class T>
void add_inplace(T* y, const T* x, size_t n) {
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) y[i] = store<T>(load(y[i]) + load(x[i]));
  });
}

template <class T>
void scale_inplace(T* y, compute_t<T> s, size_t n) {
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) y[i] = store<T>(load(y[i]) * s);
  });
}

template <class T>
void add_bias(T* y, const T* bias, size_t rows, size_t width) {
  detail::for_element_blocks(rows, width, [&](size_t lo, size_t hi) {
    for (size_t r = lo; r < hi; ++r) {
      T* row = y + r * width;
#pragma omp simd
      for (size_t c = 0; c < width; ++c) row[c] = store<T>(load(row[c]) + load(bias[c]));
    }
  });
}

template void add_bias<float>(float*, const float*, size_t, size_t);
template void add_bias<double>(double*, const double*, size_t, size_t);
template void add_bias<bf16>(bf16*, const bf16*, size_t, size_t);
template void add_bias<f16>(f16*, const f16*, size_t, size_t);

template <class T>
void add_bias_backward(compute_t<T>* dbias, const T* dy, size_t rows, size_t width) {
  detail::for_column_ranges(static_cast<int>(width), rows * width, [&](int c0, int c1) {
    for (size_t r = 0; r < rows; ++r) {
      const T* row = dy + r * width;
#pragma omp simd
      for (int c = c0; c < c1; ++c) dbias[c] += load(row[c]);
    }
  });
}

template void add_bias_backward<float>(float*, const float*, size_t, size_t);
template void add_bias_backward<double>(double*, const double*, size_t, size_t);
template void add_bias_backward<bf16>(float*, const bf16*, size_t, size_t);
template void add_bias_backward<f16>(float*, const f16*, size_t, size_t);
template void add<float>(float*, const float*, const float*, size_t);
template void add<double>(double*, const double*, const double*, size_t);
template void add<bf16>(bf16*, const bf16*, const bf16*, size_t);
template void add<f16>(f16*, const f16*, const f16*, size_t);
template void add_inplace<float>(float*, const float*, size_t);
template void add_inplace<double>(double*, const double*, size_t);
template void add_inplace<bf16>(bf16*, const bf16*, size_t);
template void add_inplace<f16>(f16*, const f16*, size_t);
template void scale_inplace<float>(float*, float, size_t);
template void scale_inplace<double>(double*, double, size_t);
template void scale_inplace<bf16>(bf16*, float, size_t);
template void scale_inplace<f16>(f16*, float, size_t);

}  // namespace tessera::kernels
