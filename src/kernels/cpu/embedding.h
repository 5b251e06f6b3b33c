#pragma once
// Token (and learned position) embedding lookup.
// Shapes: B batch, T time (Tn in code), C channels, V vocabulary, maxT the rows of wpe (>= Tn).
#include <cstdint>

namespace tessera::kernels {

// out[B,T,C] = wte[tokens[b,t]] + wpe[t]. wte: [V,C]; wpe: [maxT,C] or null (no learned
// positions). A token id outside [0, V) throws tessera::Error naming the id, its position and V.
template <class T>
void embedding_forward(T* out, const int32_t* tokens /*[B,T]*/, const T* wte, const T* wpe, int B, int Tn, int C,
                       int V);

// dwte[V,C] += scatter of dout[B,T,C] by token; dwpe[maxT,C] += Σ_b dout[b,t] (skipped when null).
// tokens are the ones the forward checked.
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C);

}  // namespace tessera::kernels
