#pragma once
// SwiGLU gating (Llama MLP): out = silu(gate) * up, silu(g) = g * sigmoid(g).
// Shapes: gate, up, out are [N,F] flattened to n elements.
#include <cstddef>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, size_t n);

// dgate[n], dup[n] written.
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n);

}  // namespace tessera::kernels
