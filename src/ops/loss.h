#pragma once
// Fused softmax + cross-entropy over the last dimension of the logits. Shapes: N.. rows (any
// leading dimensions, usually [B, T]), V vocabulary. losses and targets (i32) hold one value per
// row, shaped like the logits without their last dimension, or flat [N]; losses are f32 whatever
// the logits' dtype. Rows whose target is ignore_index contribute no loss and no gradient.
#include <cstdint>
#include <functional>
#include <span>

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

// Where this rank's block of logits lies in a vocabulary split over ranks.
struct VocabBlock {
  int64_t first = 0;  // the class of column 0
  int64_t real = 0;   // columns that are classes of the model; the rest are padding that never wins
  int64_t vocab = 0;  // the model's vocabulary: targets lie in [0, vocab)
};
// Combines one f32 value per row over the ranks that split the vocabulary, in place; empty: this
// rank holds the whole vocabulary.
struct VocabReductions {
  std::function<void(std::span<float>)> max, sum;
};

// Training over a vocabulary split over ranks (Megatron's vocabulary-parallel cross-entropy):
// logits_inout [N.., V] are this rank's block; the row maximum, the target's logit and the sum of
// exponentials are combined over the ranks, never the logits. Writes losses [N..] (the same on
// every rank) and OVERWRITES the block with its part of the gradient (softmax - onehot) ·
// grad_scale, zero in the padding. Returns the sum of the losses over the rows not ignored. With
// the whole vocabulary and no reductions its bits are cross_entropy_forward_backward's.
double vocab_parallel_cross_entropy(const Tensor& logits_inout, const Tensor& losses, const Tensor& targets,
                                    int ignore_index, float grad_scale, const VocabBlock& block,
                                    const VocabReductions& reductions);

}  // namespace tessera::ops
