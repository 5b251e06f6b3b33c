#pragma once
// GELU, tanh approximation (GPT-2; PyTorch approximate="tanh"):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Shapes: n elements.
#include <cstddef>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

template <class T>
void gelu_forward(T* out, const T* inp, size_t n);  // out[n] = gelu(inp[n])

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);  // dinp[n] = gelu'(inp) * dout (written)

}  // namespace tessera::kernels
