#pragma once
// Token and learned position embeddings. Shapes: B batch, T time, C channels, V vocabulary,
// maxT the rows of the position table (>= T). Token ids are i32. Parameter gradients accumulate
// (+=) and are f32 whatever the dtype of the tables and of dy.
#include "core/tensor.h"

namespace tessera::ops {

// y [B, T, C] = wte [V, C] [tokens [B, T]] + wpe [maxT, C] [t] (wpe optional: no learned
// positions). A token id outside [0, V) throws, naming the id and its position.
void embedding_forward(const Tensor& y, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
// dwte [V, C] += dy [B, T, C] scattered by tokens [B, T]; dwpe [maxT, C] [t] += Σ_b dy [b, t]
// (dwpe optional).
void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dy, const Tensor& tokens);

// Vocabulary-parallel lookup: table [V, C] holds rows [first_row, first_row + V) of a vocabulary
// of `vocab` ids. y [B, T, C] = the held row of each token, 0 for tokens held elsewhere (summed
// over the ranks that split the table, every token finds its row once). A token id outside
// [0, vocab) throws, naming the id and its position.
void embedding_rows_forward(const Tensor& y, const Tensor& tokens, const Tensor& table, int64_t first_row,
                            int64_t vocab);
// dtable [V, C] += dy [B, T, C] scattered by the tokens it holds.
void embedding_rows_backward(const Tensor& dtable, const Tensor& dy, const Tensor& tokens, int64_t first_row);
// y [B, T, C] += wpe [maxT, C] [t]; dwpe [maxT, C] [t] += Σ_b dy [b, t].
void positions_forward(const Tensor& y, const Tensor& wpe);
void positions_backward(const Tensor& dwpe, const Tensor& dy);

}  // namespace tessera::ops
