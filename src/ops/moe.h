#pragma once
// Tensor-level ops of a mixture-of-experts layer (kernels/cpu/moe_router.h has the definitions).
// Shapes: N tokens, E experts, k choices per token, C channels, R rows. The router runs in f32:
// its tensors are f32 whatever the compute dtype; the row moves take any floating dtype, with
// f32 scales.
#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace tessera::ops {

// From logits [N, E]: probs [N, E], lse [N], gate [N, k] (f32), choice [N, k], slot [N, k] (i32;
// -1: dropped), and load[E] rows each expert takes (≤ capacity). All written.
void moe_route(const Tensor& probs, const Tensor& lse, const Tensor& choice, const Tensor& gate, const Tensor& slot,
               std::span<int32_t> load, const Tensor& logits, int capacity);
// The Switch load-balancing loss of a routing; dprob [E] (undefined: not wanted) receives its
// gradient with respect to each token's probabilities.
double moe_aux_loss(const Tensor& dprob, const Tensor& probs, const Tensor& choice);
// The router z-loss (1/N) Σ lse².
double moe_z_loss(const Tensor& lse);
// dlogits [N, E] (written) of Σ gate·dgate + aux_coef·aux + z_coef·z; dprob may be undefined when
// aux_coef is 0.
void moe_router_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& lse, const Tensor& choice,
                         const Tensor& dgate, const Tensor& dprob, float aux_coef, float z_coef);

// out [R, C] = scale[r] · x [N, C] at rows [R] (i32); scale f32 [R], undefined: 1.
void gather_rows(const Tensor& out, const Tensor& x, const Tensor& rows, const Tensor& scale = Tensor());
// y [N, C] at rows[r] += scale[r] · src [R, C] (scale f32 [R], undefined: 1), in order of r.
void scatter_add_rows(const Tensor& y, const Tensor& src, const Tensor& rows, const Tensor& scale = Tensor());
// dscale [R] (f32, written) = Σ_c dy[rows[r], c] · src[r, c].
void gathered_row_dots(const Tensor& dscale, const Tensor& dy, const Tensor& src, const Tensor& rows);

}  // namespace tessera::ops
