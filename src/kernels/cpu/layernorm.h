#pragma once
// Layer normalization over the last dimension. Shapes: N rows (usually B*T), C channels.
namespace tessera::kernels {

// out[N,C] = (inp - mean) * rstd * weight[C] + bias[C]; saves mean[N] and rstd[N] for backward.
// bias may be null (no bias).
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C, T eps);

// dinp[N,C] written (skipped when null); dweight[C] += and dbias[C] += (each skipped when null).
// mean[N], rstd[N] are the ones the forward saved.
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int N, int C);

}  // namespace tessera::kernels
