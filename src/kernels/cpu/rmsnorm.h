#pragma once
// RMS normalization (Llama) over the last dimension. Shapes: N rows (usually B*T), C channels.
namespace tessera::kernels {

// out[N,C] = inp * rstd * weight[C], rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd[N].
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, T eps);

// dinp[N,C] written (skipped when null); dweight[C] += (skipped when null).
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C);

}  // namespace tessera::kernels
