#pragma once
// Elementwise ops of the residual stream. Every tensor of one call has the same shape, any shape
// ([B, T, C] in the models).
#include <cstdint>

#include "core/tensor.h"

namespace tessera::ops {

// y += x.
void add_inplace(const Tensor& y, const Tensor& x);
// y [N.., C] += b [C] on every row.
void add_bias(const Tensor& y, const Tensor& b);
// add_bias's backward for the bias: db [C] += dy [N.., C] summed over its rows; db is f32 (a
// parameter gradient) whatever dy's dtype.
void add_bias_backward(const Tensor& db, const Tensor& dy);

// Inverted dropout with the counter-based RNG: element i of x is kept iff
// uniform(seed, stream, offset + i) >= p and then scaled by 1 / (1 - p); p in [0, 1]. No mask is
// stored: the backward regenerates it from the same (seed, stream, offset). y may be x (in place).
void dropout_forward(const Tensor& y, const Tensor& x, float p, uint64_t seed, uint64_t stream, uint64_t offset);
// dx from dy with the forward's mask; dx may be dy (in place).
void dropout_backward(const Tensor& dx, const Tensor& dy, float p, uint64_t seed, uint64_t stream, uint64_t offset);

}  // namespace tessera::ops
