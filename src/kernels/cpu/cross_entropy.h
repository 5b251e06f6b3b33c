#pragma once
// Fused softmax + cross-entropy over logits. Shapes: N rows (usually B*T), V vocabulary.
// Rows whose target equals ignore_index contribute no loss and no gradient.
// Types as in kernels/cpu/element.h: the losses, grad_scale and the per-row values combined over
// ranks in compute_t<T>; the logits and their gradient in T.
#include <cstdint>
#include <functional>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

// Evaluation: losses[N] per row (0 for ignored rows). Returns the mean over non-ignored rows
// (0 when every row is ignored) and stores their number in *count (when count is not null).
template <class T>
double cross_entropy_forward(compute_t<T>* losses, const T* logits /*[N,V]*/, const int32_t* targets /*[N]*/, int N,
                             int V, int ignore_index, int64_t* count);

// Training: computes losses[N] and OVERWRITES logits[N,V] with dlogits = (softmax - onehot) *
// grad_scale (zero rows for ignored targets), so the probabilities are never stored twice.
// Returns the sum of the losses over non-ignored rows. grad_scale is usually 1 / (number of
// non-ignored rows in the global batch).
template <class T>
double cross_entropy_forward_backward(T* logits_inout /*[N,V]*/, compute_t<T>* losses /*[N]*/,
                                      const int32_t* targets /*[N]*/, int N, int V, int ignore_index,
                                      compute_t<T> grad_scale);

// Combines one value per row over the ranks that split the vocabulary (in place); an empty
// function: this rank holds the whole vocabulary. The kernels take RowReduce<compute_t<T>>.
template <class T>
using RowReduce = std::function<void(T* values, int n)>;

// Training over a vocabulary split in column blocks (Megatron's vocabulary-parallel loss): this
// rank holds logits_inout [N, V] for classes [first, first + V), of which the first `real` are
// classes of the model and the rest padding that can never win (the vocabulary padded to a
// multiple of the ranks). The row maximum, the target's logit and the sum of exponentials are
// combined over the ranks (max_over, sum_over) instead of gathering the logits. Writes losses[N]
// (the same on every rank) and OVERWRITES the logits with this block of their gradient (zero in
// the padding). Targets must lie in [0, vocab) or be ignore_index. Returns the sum of the losses.
// On one rank (first 0, real = V = vocab, no reductions) the bits are those of
// cross_entropy_forward_backward.
template <class T>
double vocab_parallel_cross_entropy(T* logits_inout /*[N,V]*/, compute_t<T>* losses /*[N]*/,
                                    const int32_t* targets /*[N]*/, int N, int V, int real, int first, int vocab,
                                    int ignore_index, compute_t<T> grad_scale,
                                    const RowReduce<compute_t<T>>& max_over, const RowReduce<compute_t<T>>& sum_over);

}  // namespace tessera::kernels
