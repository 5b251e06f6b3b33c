#pragma once
// The router of a mixture-of-experts layer and the row moves around its experts. Shapes: N tokens
// (rows), E experts, k choices per token, C channels, R rows of an expert's buffer.
//
// Routing (Switch for k = 1, GShard for k = 2): probs = softmax(logits) per token; a token's
// choices are its k most probable experts (ties to the lower index), its gate for a choice that
// expert's probability. Each expert takes at most `capacity` rows: first choices claim slots
// before second choices, and within one rank of choice tokens in order; a choice that finds its
// expert full is dropped (slot -1), so the token's other choice still runs and the residual
// carries it past the layer.
//
// Losses over the N tokens (both in compute_t<T>):
//   aux (Switch, Fedus et al. 2021 eq. 4):  E · Σ_e f_e · P_e, f_e the fraction of tokens whose
//       first choice is e (before capacity), P_e the mean probability of e;
//   z (ST-MoE, Zoph et al. 2022):           (1/N) Σ_n logsumexp(logits_n)².
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

// probs [N, E], lse [N], choice [N, k], gate [N, k], slot [N, k] (-1: dropped) and load [E] (rows
// taken, ≤ capacity) from logits [N, E]. All written.
template <class T>
void moe_route(T* probs, T* lse, int32_t* choice, T* gate, int32_t* slot, int32_t* load, const T* logits, int N,
               int E, int k, int capacity);

// The aux loss of the routing above; dprob [E] (may be null) receives its gradient with respect to
// each token's probability of expert e, E · f_e / N (the same for every token).
template <class T>
T moe_aux_loss(T* dprob, const T* probs, const int32_t* choice, int N, int E, int k);
template <class T>
T moe_z_loss(const T* lse, int N);

// dlogits [N, E] (written) of  Σ gate · dgate  +  aux_coef · aux  +  z_coef · z : the softmax's
// backward of dprobs[n, e] = Σ_j [choice[n, j] = e] dgate[n, j] + aux_coef · dprob[e], plus the
// z-loss's own z_coef · (2 / N) · lse[n] · probs[n, e]. dgate [N, k]; dprob [E] may be null when
// aux_coef is 0.
template <class T>
void moe_router_backward(T* dlogits, const T* probs, const T* lse, const int32_t* choice, const T* dgate,
                         const T* dprob, compute_t<T> aux_coef, compute_t<T> z_coef, int N, int E, int k);

// out[r, :] = scale[r] · x[rows[r], :] for r < R (out [R, C], x [N, C]; scale [R] may be null: 1).
template <class T>
void gather_rows(T* out, const T* x, const int32_t* rows, const compute_t<T>* scale, size_t R, size_t C);
// y[rows[r], :] += scale[r] · src[r, :] for r < R, in order of r (y [N, C], src [R, C], scale [R]
// may be null: 1).
template <class T>
void scatter_add_rows(T* y, const T* src, const int32_t* rows, const compute_t<T>* scale, size_t R, size_t C);
// dscale[r] = Σ_c dy[rows[r], c] · src[r, c]: the gradient of the scales above (written).
template <class T>
void gathered_row_dots(compute_t<T>* dscale, const T* dy, const T* src, const int32_t* rows, size_t R, size_t C);

}  // namespace tessera::kernels
