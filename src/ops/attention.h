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

// y [B, T, 3C]: q and k of x [B, T, 3C] rotated by position (angle t · theta^(-2i/D) for the pair
// (i, i + D/2) of each head; D even), v copied. y may be x (in place).
void rope_forward(const Tensor& y, const Tensor& x, int n_head, float theta);
// dx [B, T, 3C] from dy [B, T, 3C] by the inverse rotation. dx may be dy (in place).
void rope_backward(const Tensor& dx, const Tensor& dy, int n_head, float theta);

}  // namespace tessera::ops
