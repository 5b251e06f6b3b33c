#pragma once
// Layer normalization over the last dimension. Shapes: N rows (usually B*T), C channels.
// Types as in kernels/cpu/element.h: mean, rstd and the parameter gradients in compute_t<T>.
#include "kernels/cpu/element.h"

namespace tessera::kernels {

// out[N,C] = (inp - mean) * rstd * weight[C] + bias[C]; saves mean[N] and rstd[N] for backward.
// bias may be null (no bias).
template <class T>
void layernorm_forward(T* out, compute_t<T>* mean, compute_t<T>* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C, compute_t<T> eps);

// dinp[N,C] written (skipped when null); dweight[C] += and dbias[C] += (each skipped when null).
// mean[N], rstd[N] are the ones the forward saved.
template <class T>
void layernorm_backward(T* dinp, compute_t<T>* dweight, compute_t<T>* dbias, const T* dout, const T* inp,
                        const T* weight, const compute_t<T>* mean, const compute_t<T>* rstd, int N, int C);

}  // namespace tessera::kernels
