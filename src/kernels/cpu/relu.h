#pragma once
// ReLU and squared ReLU (Primer: relu(x)^2), the ungated MLP's alternatives to GELU. Shapes: n
// elements. Both derivatives are taken as one-sided at 0: relu'(0) = 0, relu2'(0) = 0, as PyTorch's.
#include <cstddef>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

template <class T>
void relu_forward(T* out, const T* inp, size_t n);  // out[n] = max(inp, 0)

template <class T>
void relu_backward(T* dinp, const T* inp, const T* dout, size_t n);  // dinp[n] = (inp > 0) · dout (written)

template <class T>
void relu2_forward(T* out, const T* inp, size_t n);  // out[n] = max(inp, 0)^2

template <class T>
void relu2_backward(T* dinp, const T* inp, const T* dout, size_t n);  // dinp[n] = 2 max(inp, 0) · dout (written)

}  // namespace tessera::kernels
