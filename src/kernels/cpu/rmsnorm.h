#pragma once
// RMS normalization (Llama) over the last dimension. Shapes: N rows (usually B*T), C channels.
// Types as in kernels/cpu/element.h: rstd and the weight gradient in compute_t<T>.
#include "kernels/cpu/element.h"

namespace tessera::kernels {

// out[N,C] = inp * rstd * weight[C], rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd[N].
template <class T>
void rmsnorm_forward(T* out, compute_t<T>* rstd, const T* inp, const T* weight, int N, int C, compute_t<T> eps);

// dinp[N,C] written (skipped when null); dweight[C] += (skipped when null).
template <class T>
void rmsnorm_backward(T* dinp, compute_t<T>* dweight, const T* dout, const T* inp, const T* weight,
                      const compute_t<T>* rstd, int N, int C);

}  // namespace tessera::kernels
