#pragma once
// Rotary position embedding (Llama; rotate-half convention of HF Llama and the PyTorch reference
// implementations): within each head, the pair (x[i], x[i + D/2]) at position t is rotated by the
// angle t * theta^(-2i/D). Applied to the q and k parts of a packed qkv; v is copied unchanged.
// Shapes: B batch, T time (Tn in code), C channels, H heads, D = C/H (even).
namespace tessera::kernels {

// out[B,T,3C] from inp[B,T,3C] (per token: q[C] k[C] v[C]). out may alias inp. Token t sits at
// position position0 + t: decoding with a key/value cache rotates new tokens at their place in the
// sequence.
template <class T>
void rope_forward(T* out, const T* inp, int B, int Tn, int C, int H, float theta, int position0 = 0);

// dinp[B,T,3C] written from dout[B,T,3C]: the inverse rotation (rotations are orthogonal). dinp may alias dout.
template <class T>
void rope_backward(T* dinp, const T* dout, int B, int Tn, int C, int H, float theta, int position0 = 0);

}  // namespace tessera::kernels
