#pragma once
// Token (and learned position) embedding lookup.
// Shapes: B batch, T time (Tn in code), C channels, V vocabulary, maxT the rows of wpe (>= Tn).
// Types as in kernels/cpu/element.h: the tables' gradients in compute_t<T>.
#include <cstdint>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

// out[B,T,C] = wte[tokens[b,t]] + wpe[t]. wte: [V,C]; wpe: [maxT,C] or null (no learned
// positions). A token id outside [0, V) throws tessera::Error naming the id, its position and V.
template <class T>
void embedding_forward(T* out, const int32_t* tokens /*[B,T]*/, const T* wte, const T* wpe, int B, int Tn, int C,
                       int V);

// dwte[V,C] += scatter of dout[B,T,C] by token; dwpe[maxT,C] += Σ_b dout[b,t] (skipped when null).
// tokens are the ones the forward checked.
template <class T>
void embedding_backward(compute_t<T>* dwte, compute_t<T>* dwpe, const T* dout, const int32_t* tokens, int B, int Tn,
                        int C);

// A table holding rows [first, first + V) of the vocabulary (vocabulary-parallel embedding):
// out[B,T,C] = table[tokens[b,t] - first] for the ids it holds, 0 for the others. The caller has
// checked the ids against the whole vocabulary.
template <class T>
void embedding_rows_forward(T* out, const int32_t* tokens /*[B,T]*/, const T* table /*[V,C]*/, int B, int Tn, int C,
                            int first, int V);
// dtable[V,C] += dout[B,T,C] scattered by the ids it holds.
template <class T>
void embedding_rows_backward(compute_t<T>* dtable, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                             int first, int V);

// Learned positions added to a sum of token rows: out[b,t] += wpe[t]; and their gradient,
// dwpe[t] += Σ_b dout[b,t]. wpe: [maxT,C], maxT >= Tn.
template <class T>
void positions_forward(T* out, const T* wpe, int B, int Tn, int C);
template <class T>
void positions_backward(compute_t<T>* dwpe, const T* dout, int B, int Tn, int C);

}  // namespace tessera::kernels
