#pragma once
// Optimizer updates: the ops an optimizer (src/optim) runs on the elements a rank owns. Every
// tensor of one call is 1-D, f32 and (Adafactor's row and column statistics aside) of one length
// N: a run of one parameter's master values, their reduced gradients, and the optimizer's state
// for those elements (optim::Segment's views). An optimizer computes its scalars (learning rates,
// trust ratios, norms over ranks) and calls these; the per-element work is a backend's kernel, so
// a device backend supplies its update kernels here and the optimizers do not change. The kernels'
// headers (kernels/cpu/adamw.h, sgd.h, lamb.h, lars.h, adam8bit.h, one_bit_adam.h, adafactor.h)
// give the exact update each computes.
#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "kernels/cpu/adafactor.h"
#include "kernels/cpu/sign_compression.h"

namespace tessera::ops {

// The layout of a sign-compressed message: kSignBlock elements share a scale, eight share a byte.
using kernels::kSignBlock;
using kernels::sign_bits_bytes;
using kernels::sign_blocks;

// AdamW's hyperparameters for one step (kernels/cpu/adamw.h): weight_decay is the one this
// parameter takes; variance_frozen_at > 0 keeps v as it was after that step.
struct AdamWStep {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 1;
  int64_t variance_frozen_at = 0;
};
void adamw_update(const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWStep& k);

// SGD's hyperparameters for one step (kernels/cpu/sgd.h).
struct SgdStep {
  float lr = 0, momentum = 0, weight_decay = 0;
  bool decoupled_weight_decay = false, nesterov = false;
};
// `momentum_buffer` undefined: plain SGD (momentum 0).
void sgd_update(const Tensor& value, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& k);

// LAMB's hyperparameters for one step (kernels/cpu/lamb.h); weight_decay is this parameter's.
struct LambStep {
  float beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 1;
};
// Sums of squares over the run, for a norm of the whole tensor.
struct SquareSums {
  double first = 0;   // LAMB: the weights; LARS: the weights
  double second = 0;  // LAMB: the update direction; LARS: the gradient
};
// Advances m and v; when `adapted` (the tensor takes the trust ratio) returns Σ w² and Σ u².
SquareSums lamb_moments(const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& v, const LambStep& k,
                        bool adapted);
// w -= step_size · u from the advanced moments.
void lamb_apply(const Tensor& value, const Tensor& m, const Tensor& v, const LambStep& k, float step_size);

// Σ w² and Σ g² over the run (kernels/cpu/lars.h).
SquareSums lars_squares(const Tensor& value, const Tensor& grad);
// d = scale·(g + wd·w); with `momentum_buffer` defined b = mu·b + d, w -= b; else w -= d.
void lars_update(const Tensor& value, const Tensor& grad, const Tensor& momentum_buffer, float scale,
                 float weight_decay, float mu);

// 8-bit Adam on one block's run of N elements (kernels/cpu/adam8bit.h): m_codes and v_codes (u8
// [N]) index signed_code and unsigned_code (f32 [K], sorted) and take the block's scales; new_m
// and new_v (f32 [N]) receive the new moments, whose largest magnitudes come back.
struct BlockMaxima {
  float m = 0, v = 0;
};
BlockMaxima adam8bit_block(const Tensor& value, const Tensor& grad, const Tensor& m_codes, const Tensor& v_codes,
                           float m_scale, float v_scale, const Tensor& signed_code, const Tensor& unsigned_code,
                           const Tensor& new_m, const Tensor& new_v, const AdamWStep& k);
// codes (u8 [N]) = the indexes of the entries of `code` (f32 [K], sorted) nearest to
// values (f32 [N]) / absmax, or to 0 when absmax is 0.
void quantize_to_codes(const Tensor& codes, const Tensor& values, const Tensor& code, float absmax);

// 1-bit Adam after its variance froze (kernels/cpu/one_bit_adam.h): the local momentum
// m = beta1·m + (1 - beta1)·(ranks·g), and the update from the exchanged momentum and frozen v.
void one_bit_adam_momentum(const Tensor& m, const Tensor& grad, float beta1, float ranks);
struct FrozenAdamStep {
  float step_size = 0, bias2_sqrt = 1, eps = 0, decay = 1;
};
void one_bit_adam_apply(const Tensor& value, const Tensor& m, const Tensor& v, const FrozenAdamStep& k);

// Sign compression with error feedback (kernels/cpu/sign_compression.h): acc (f32 [N]) becomes
// bits (u8 [sign_bits_bytes(N)]) and scales (f32 [sign_blocks(N)]), and keeps the error.
void sign_compress(const Tensor& acc, const Tensor& bits, const Tensor& scales);
// out (f32 [N]) += weight × the decompressed message (bits, scales as sign_compress wrote them).
void add_sign_decompressed(const Tensor& out, const Tensor& bits, const Tensor& scales, float weight);

// Adafactor's passes (kernels/cpu/adafactor.h) over one tensor's owned run of N elements: `runs`
// place them in the whole tensor (padding left out) and `layout` says how its statistics are kept.
// The statistics are per-tensor tables of doubles that the optimizer sums over the ranks holding
// the tensor's parts (as LAMB's SquareSums), so they pass as host spans; the tensors are master
// f32 as above: grad, value, v and m [N], R row [matrices·rows], C col [matrices·cols].
using kernels::AdafactorGroupStep;
using kernels::AdafactorLayout;
using kernels::ElementRun;
// Adds Σ w² per group to weight_squares [groups] and, when factored, the row and column sums of
// g² + eps1 to row_sums [matrices·rows] and col_sums [matrices·cols] (empty when not).
void adafactor_sums(const Tensor& value, const Tensor& grad, std::span<const ElementRun> runs,
                    const AdafactorLayout& layout, double eps1, std::span<double> row_sums, std::span<double> col_sums,
                    std::span<double> weight_squares);
// R and C advanced from the (reduced) sums with weights old (β2) and new (1 − β2); row_totals
// [matrices] receives ΣR of each matrix.
void adafactor_factored_moment(const Tensor& row, const Tensor& col, std::span<const double> row_sums,
                               std::span<const double> col_sums, const AdafactorLayout& layout, float old_weight,
                               float new_weight, std::span<double> row_totals);
// v advanced from g² + eps1 over all N elements.
void adafactor_vector_moment(const Tensor& v, const Tensor& grad, float old_weight, float new_weight, float eps1);
// Adds Σ U² per group to update_squares [groups]: U from R, C and ΣR, or from v.
void adafactor_factored_update_squares(const Tensor& grad, const Tensor& row, const Tensor& col,
                                       std::span<const double> row_totals, std::span<const ElementRun> runs,
                                       const AdafactorLayout& layout, std::span<double> update_squares);
void adafactor_vector_update_squares(const Tensor& grad, const Tensor& v, std::span<const ElementRun> runs,
                                     const AdafactorLayout& layout, std::span<double> update_squares);
// Updates the runs' elements with their groups' steps (groups [groups]); `m` undefined: no first
// moment.
void adafactor_factored_apply(const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& row,
                              const Tensor& col, std::span<const double> row_totals, std::span<const ElementRun> runs,
                              const AdafactorLayout& layout, std::span<const AdafactorGroupStep> groups, float beta1);
void adafactor_vector_apply(const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& v,
                            std::span<const ElementRun> runs, const AdafactorLayout& layout,
                            std::span<const AdafactorGroupStep> groups, float beta1);

}  // namespace tessera::ops
