#pragma once
// Row softmax over the last dimension. Shapes: N rows, C entries per row.
#include "kernels/cpu/element.h"

namespace tessera::kernels {

template <class T>
void softmax_forward(T* out, const T* inp, int N, int C);  // out[N,C] = softmax(inp[N,C]) per row

// dinp[N,C] = out * (dout - Σ_row dout * out), written; out is the forward's output.
template <class T>
void softmax_backward(T* dinp, const T* dout, const T* out, int N, int C);

}  // namespace tessera::kernels
