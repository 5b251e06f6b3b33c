#pragma once
// Fused softmax + cross-entropy over the last dimension of the logits. Shapes: N.. rows (any
// leading dimensions, usually [B, T]), V vocabulary. losses and targets (i32) hold one value per
// row, shaped like the logits without their last dimension, or flat [N]. Rows whose target is
// ignore_index contribute no loss and no gradient.
#include <cstdint>

#include "core/tensor.h"

namespace tessera::ops {

// Training: writes losses [N..] and OVERWRITES logits_inout [N.., V] with their gradient
// (softmax - onehot) · grad_scale, so the probabilities are never stored twice. Returns the sum
// of the losses over the rows not ignored.
double cross_entropy_forward_backward(const Tensor& logits_inout, const Tensor& losses, const Tensor& targets,
                                      int ignore_index, float grad_scale);
// Evaluation: writes losses [N..] (0 for ignored rows) from logits [N.., V]. Returns the mean over
// the rows not ignored (0 when all are) and stores their number in *count when count is not null.
double cross_entropy_forward(const Tensor& losses, const Tensor& logits, const Tensor& targets, int ignore_index,
                             int64_t* count);

}  // namespace tessera::ops
