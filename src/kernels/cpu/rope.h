#pragma once
// Rotary position embedding (Llama; rotate-half convention of HF Llama and the PyTorch reference
// implementations): within each head, the pair (x[i], x[i + D/2]) at position t is rotated by the
// angle t * theta^(-2i/D). Applied to the q and k parts of a packed qkv; v is copied unchanged.
// Shapes: B batch, T time (Tn in code), C = H·D query channels, H query heads, Hkv key/value heads
// (a divisor of H: grouped-query attention when fewer), D even, W3 = (H + 2·Hkv)·D the qkv row
// (q [C], k [Hkv·D], v [Hkv·D], as kernels/cpu/attention.h).
#include "kernels/cpu/element.h"

namespace tessera::kernels {

// out[B,T,W3] from inp[B,T,W3]. out may alias inp. Token t sits at
// position position0 + t: decoding with a key/value cache rotates new tokens at their place in the
// sequence.
template <class T>
void rope_forward(T* out, const T* inp, int B, int Tn, int C, int H, int Hkv, float theta, int position0 = 0);

// dinp[B,T,W3] written from dout[B,T,W3]: the inverse rotation (rotations are orthogonal). dinp may alias dout.
template <class T>
void rope_backward(T* dinp, const T* dout, int B, int Tn, int C, int H, int Hkv, float theta, int position0 = 0);

}  // namespace tessera::kernels
