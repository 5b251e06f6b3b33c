#pragma once
// Elementwise helpers for residual streams and gradient scaling. Shapes: n elements.
// Types as in kernels/cpu/element.h: the bias gradient and the scale in compute_t<T>.
#include <cstddef>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

template <class T>
void add(T* out, const T* a, const T* b, size_t n);  // out = a + b (out may alias a or b)

template <class T>
void add_inplace(T* y, const T* x, size_t n);  // y += x

template <class T>
void scale_inplace(T* y, compute_t<T> s, size_t n);  // y *= s

template <class T>
void add_bias(T* y, const T* bias, size_t rows, size_t width);  // y[r, c] += bias[c]

// Its backward for the bias: dbias[c] += Σ_r dy[r, c], rows summed in order (the same bits for
// any thread count).
template <class T>
void add_bias_backward(compute_t<T>* dbias, const T* dy, size_t rows, size_t width);

}  // namespace tessera::kernels
