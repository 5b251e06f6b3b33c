#pragma once
// Fully connected layer, weights stored like PyTorch nn.Linear: weight[OC,IC].
// Shapes: N rows (usually B*T), IC input features, OC output features.
// Types as in kernels/cpu/element.h: parameter gradients in compute_t<T> (f32 for bf16 and f16).
#include "kernels/cpu/element.h"

namespace tessera::kernels {

// out[N,OC] = inp[N,IC] · weight[OC,IC]^T + bias[OC] (bias may be null).
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC);

// dinp[N,IC] = dout[N,OC] · weight[OC,IC] (written; skipped when dinp is null);
// dweight[OC,IC] += dout^T · inp[N,IC]; dbias[OC] += Σ_rows dout (skipped when dbias is null).
template <class T>
void linear_backward(T* dinp, compute_t<T>* dweight, compute_t<T>* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int IC, int OC);

}  // namespace tessera::kernels
