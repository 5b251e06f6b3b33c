#pragma once
// Causal multi-head self-attention and rotary position embedding on a packed qkv: per token
// q [C], k [C], v [C], each C split into H heads of D = C/H values (the output of the qkv linear).
// Shapes: B batch, T time, C channels, H heads (n_head), D head size. Gradients are written (=).
#include "core/tensor.h"

namespace tessera::ops {

// out [B, T, C] = softmax(q·kᵀ / sqrt(D), causal) · v from qkv [B, T, 3C]; saves lse [B, H, T],
// the log-sum-exp of each query row's scores, for the backward.
void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head);
// dqkv [B, T, 3C] from dout [B, T, C] and the forward's qkv [B, T, 3C], out [B, T, C], lse [B, H, T].
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int n_head);

// Decoding with a key/value cache, forward only (generation never trains). qkv [B, T, 3C] holds T
// new tokens at positions past .. past + T - 1; k_cache and v_cache [B, S, C] hold the keys and
// values of the positions before `past` (S, the cache's capacity, >= past + T). Writes the new
// tokens' keys and values into the caches, then out [B, T, C]: rows past .. past + T - 1 of
// attention_forward over the whole sequence.
void attention_decode(const Tensor& out, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int64_t past,
                      int n_head);

// y [B, T, 3C]: q and k of x [B, T, 3C] rotated by position (angle p · theta^(-2i/D) for the pair
// (i, i + D/2) of each head; D even; token t at position p = position0 + t), v copied. y may be x
// (in place). position0 > 0 places new tokens after a decoding cache's.
void rope_forward(const Tensor& y, const Tensor& x, int n_head, float theta, int64_t position0 = 0);
// dx [B, T, 3C] from dy [B, T, 3C] by the inverse rotation. dx may be dy (in place).
void rope_backward(const Tensor& dx, const Tensor& dy, int n_head, float theta, int64_t position0 = 0);

}  // namespace tessera::ops
