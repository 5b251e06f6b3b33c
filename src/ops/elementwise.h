#pragma once
// Elementwise ops of the residual stream. Every tensor of one call has the same shape, any shape
// ([B, T, C] in the models).
#include <cstdint>

#include "core/tensor.h"

namespace tessera::ops {

// y += x.
void add_inplace(const Tensor& y, const Tensor& x);
// y = s · x, in the compute type (16-bit values are widened, scaled and rounded back); y may be x.
void scale(const Tensor& y, const Tensor& x, float s);
// dst = src, same shape and dtype (any shape): ZeRO's moves between a rank's shard and the
// parameters it gathers, so a device backend supplies the copy.
void copy(const Tensor& dst, const Tensor& src);
// y [N.., C] += b [C] on every row.
void add_bias(const Tensor& y, const Tensor& b);
// add_bias's backward for the bias: db [C] += dy [N.., C] summed over its rows; db is f32 (a
// parameter gradient) whatever dy's dtype.
void add_bias_backward(const Tensor& db, const Tensor& dy);

// out (f32, written) = x widened from its dtype (f32, bf16 or f16): exact, every 16-bit value is an
// f32 one. For the parts of a mixed-precision step that run in f32 whatever the compute dtype (an
// MoE router, nn/moe.h).
void widen(const Tensor& out, const Tensor& x);
// out (written) = x (f32) rounded to out's dtype (nearest even for bf16 and f16).
void narrow(const Tensor& out, const Tensor& x);

// Inverted dropout with the counter-based RNG: element i of x is kept iff
// uniform(seed, stream, offset + i) >= p and then scaled by 1 / (1 - p); p in [0, 1]. No mask is
// stored: the backward regenerates it from the same (seed, stream, offset). y may be x (in place).
void dropout_forward(const Tensor& y, const Tensor& x, float p, uint64_t seed, uint64_t stream, uint64_t offset);
// dx from dy with the forward's mask; dx may be dy (in place).
void dropout_backward(const Tensor& dx, const Tensor& dy, float p, uint64_t seed, uint64_t stream, uint64_t offset);

}  // namespace tessera::ops
