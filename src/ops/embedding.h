#pragma once
// Token and learned position embeddings. Shapes: B batch, T time, C channels, V vocabulary,
// maxT the rows of the position table (>= T). Token ids are i32. Parameter gradients accumulate
// (+=).
#include "core/tensor.h"

namespace tessera::ops {

// y [B, T, C] = wte [V, C] [tokens [B, T]] + wpe [maxT, C] [t] (wpe optional: no learned
// positions). A token id outside [0, V) throws, naming the id and its position.
void embedding_forward(const Tensor& y, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
// dwte [V, C] += dy [B, T, C] scattered by tokens [B, T]; dwpe [maxT, C] [t] += Σ_b dy [b, t]
// (dwpe optional).
void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dy, const Tensor& tokens);

}  // namespace tessera::ops
