#pragma once
// Fused softmax + cross-entropy over logits. Shapes: N rows (usually B*T), V vocabulary.
// Rows whose target equals ignore_index contribute no loss and no gradient.
#include <cstdint>

namespace tessera::kernels {

// Evaluation: losses[N] per row (0 for ignored rows). Returns the mean over non-ignored rows
// (0 when every row is ignored) and stores their number in *count (when count is not null).
template <class T>
double cross_entropy_forward(T* losses, const T* logits /*[N,V]*/, const int32_t* targets /*[N]*/, int N, int V,
                             int ignore_index, int64_t* count);

// Training: computes losses[N] and OVERWRITES logits[N,V] with dlogits = (softmax - onehot) *
// grad_scale (zero rows for ignored targets), so the probabilities are never stored twice.
// Returns the sum of the losses over non-ignored rows. grad_scale is usually 1 / (number of
// non-ignored rows in the global batch).
template <class T>
double cross_entropy_forward_backward(T* logits_inout /*[N,V]*/, T* losses /*[N]*/, const int32_t* targets /*[N]*/,
                                      int N, int V, int ignore_index, T grad_scale);

}  // namespace tessera::kernels
