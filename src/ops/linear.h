#pragma once
// Fully connected layer y = x·wᵀ + b, w stored [OC, IC] like PyTorch nn.Linear. x and y have any
// leading dimensions (N.. = the rows, usually [B, T]); they must match. An undefined tensor means
// "none" for the optional arguments. Parameter gradients accumulate (+=), input gradients are
// written (=).
#include "core/tensor.h"

namespace tessera::ops {

// y [N.., OC] = x [N.., IC] · w [OC, IC]ᵀ + b [OC] (b optional).
void linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b);

// dx [N.., IC] = dy [N.., OC] · w [OC, IC].
void linear_backward_input(const Tensor& dx, const Tensor& dy, const Tensor& w);
// dw [OC, IC] += dy [N.., OC]ᵀ · x [N.., IC]; db [OC] += Σ_rows dy (db optional).
void linear_backward_weight(const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x);
// Both halves in one call (dx and db optional), bit for bit what the two halves give.
void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                     const Tensor& w);

}  // namespace tessera::ops
