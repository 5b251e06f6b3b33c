#pragma once
// Causal self-attention and rotary position embedding on a packed qkv (the output of the qkv
// linear): per token q [C] split into H query heads (n_head) of D = C/H values, then k and v
// [Ckv] each, split into Hkv key/value heads (n_kv_head, a divisor of H). Hkv = H is multi-head
// attention; Hkv < H grouped-query attention, where query head h reads key/value head
// h / (H/Hkv). Shapes: B batch, T time, C query channels, Ckv = Hkv·D, W3 = C + 2·Ckv.
// Gradients are written (=).
#include "core/tensor.h"

namespace tessera::ops {

// out [B, T, C] = softmax(q·kᵀ / sqrt(D), causal) · v from qkv [B, T, W3]; saves lse [B, H, T],
// the log-sum-exp of each query row's scores, for the backward; lse is f32 whatever qkv's dtype.
void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head, int n_kv_head);
// dqkv [B, T, W3] from dout [B, T, C] and the forward's qkv [B, T, W3], out [B, T, C], lse [B, H, T].
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int n_head, int n_kv_head);

// Decoding with a key/value cache, forward only (generation never trains). qkv [B, T, W3] holds T
// new tokens at positions past .. past + T - 1; k_cache and v_cache [B, S, Ckv] hold the keys and
// values of the positions before `past` (S, the cache's capacity, >= past + T). Writes the new
// tokens' keys and values into the caches, then out [B, T, C]: rows past .. past + T - 1 of
// attention_forward over the whole sequence.
void attention_decode(const Tensor& out, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int64_t past,
                      int n_head, int n_kv_head);

// y [B, T, W3]: q and k of x [B, T, W3] rotated by position (angle p · theta^(-2i/D) for the pair
// (i, i + D/2) of each head; D even; token t at position p = position0 + t), v copied. y may be x
// (in place). position0 > 0 places new tokens after a decoding cache's.
void rope_forward(const Tensor& y, const Tensor& x, int n_head, int n_kv_head, float theta, int64_t position0 = 0);
// dx [B, T, W3] from dy [B, T, W3] by the inverse rotation. dx may be dy (in place).
void rope_backward(const Tensor& dx, const Tensor& dy, int n_head, int n_kv_head, float theta, int64_t position0 = 0);

}  // namespace tessera::ops
