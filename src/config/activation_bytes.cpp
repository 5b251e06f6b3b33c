#include "config/activation_bytes.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::config {

int64_t recomputable_values_per_token(const ModelConfig& model, int tp) { return 2 * int64_t{model.n_embd} + model.ffn() / tp; }

double rebuild_flops(const ModelConfig& model, int layer, int64_t B, int64_t T, int tp) {
  const int64_t values = model.is_moe_layer(layer) ? int64_t{model.n_embd} : recomputable_values_per_token(model, tp);
  return kRebuildFlopsPerValue * static_cast<double>(values) * static_cast<double>(B * T);
}

int64_t selective_forward_values_per_token(const ModelConfig& model, int tp) { return model.ffn() / tp; }

std::vector<UnitActivationBytes> unit_activation_bytes(const ModelConfig& c, int64_t B, int64_t T, int tp, bool sp,
                                                       DType activations) {
  // Values kept per token, each an activation (4 bytes in f32, 2 in bf16 or f16) or a statistic
  // (4 bytes whatever the dtype: the norms' mean and rstd, attention's lse, the losses, token ids):
  //   embedding: its own copy of the token ids 1; output C (the first block's input)
  //   block, GPT-2: norm1 out C + mean 1 + rstd 1; qkv 3C; attention out C + lse H; residual x1 C;
  //                 norm2 out C + 2; fc out F; gelu out F            = 7C + 2F + H + 4; output C
  //   block, Llama: norm1 out C + rstd 1; rotated qkv 3C (the unrotated one is freed at once);
  //                 attention out C + lse H; residual C; norm2 out C + 1; gate F; up F; swiglu out F
  //                                                                  = 7C + 3F + H + 2; output C
  //   (the MLP's part follows model.activation, not the architecture: an ungated MLP (GELU, ReLU,
  //   squared ReLU) keeps 2F, SwiGLU 3F)
  //   (with grouped-query attention qkv holds C + 2·Hkv·D instead of 3C: W3 below)
  //                 of which selective recomputation drops the norm outputs and the activation: 2C + F,
  //                 holding the activation F only while its forward runs
  //   head: final norm out C + rstd 1 (+ mean 1 for LayerNorm); logits (then their gradient) V;
  //         losses 1; no output
  // Between the halves of a split backward a unit keeps what its weight gradients read: the
  // embedding its token ids 1; a block the inputs of its linears, norm1 out C, attention out C,
  // norm2 out C and the MLP's activation F (the selective halves rebuild the dropped ones first);
  // the head its final norm out C and the logits' gradient V.
  // Under tensor parallelism (t ranks) what lies between a region's entry and exit holds this
  // rank's heads and hidden units only: qkv, the attention output, lse and the MLP's F-wide tensors
  // divide by t, and the logits hold V padded to a multiple of t, divided by t. The residual stream
  // and the norms' statistics stay whole on every rank, and so do the norms' outputs, which the
  // projections read.
  // With sequence parallelism the residual stream, x1, the norms' statistics and every unit's
  // output hold this rank's part of the sequence, T/t tokens ("part" below). What a projection
  // reads is the whole sequence gathered from the norm's part (the norm's own output is freed), so
  // the two norm outputs C and the head's input C stay whole. While a forward runs it also holds
  // the partial sums [B, T, C] of its last projection (or of the embedding) until the
  // reduce-scatter has read them, and the head holds its norm's part until it is gathered.
  TS_CHECK(tp >= 1 && c.kv_heads() % tp == 0 && c.ffn() % tp == 0, "activation bytes for tp {} of a model with {} "
           "key/value heads and an MLP width of {}", tp, c.kv_heads(), c.ffn());
  TS_CHECK(!sp || (tp > 1 && T % tp == 0), "activation bytes under sequence parallelism need tp > 1 dividing T; got tp "
           "{}, T {}", tp, T);
  const int64_t C = c.n_embd, F = c.ffn(), H = c.n_head, V = c.vocab_size, t = tp, W3 = c.qkv_dim();
  const int64_t Vt = (V + t - 1) / t;  // this rank's logits, padding included
  const auto value = static_cast<int64_t>(dtype_size(activations));
  const int64_t tokens = B * T, part_tokens = B * (T / (sp ? t : 1));
  const int64_t whole = tokens * value;      // bytes of one activation per token of the microbatch
  const int64_t part = part_tokens * value;  // ... per token of this rank's residual stream
  const int64_t whole_stat = tokens * 4, part_stat = part_tokens * 4;  // one statistic per token
  const int64_t norm_stats = c.arch == Architecture::Gpt2 ? 2 : 1;  // LayerNorm's mean and rstd, RMSNorm's rstd
  const int64_t mlp_values = c.gated_mlp() ? 3 : 2;  // of width F: pre (and up) and the activation
  const int64_t reduce_scatter_input = sp ? C * whole : 0;
  std::vector<UnitActivationBytes> bytes;
  const int64_t gated = c.gated_mlp() ? 2 : 1;  // the MLP's first projections (SwiGLU: gate and up)
  bytes.push_back({.own = 1 * whole_stat, .output = C * part, .weight_half = 1 * whole_stat,
                   .weight_half_gradients = C * whole, .forward_transient = reduce_scatter_input, .exact = 1 * whole_stat});
  const int64_t split = W3 + C + mlp_values * F;  // activations inside the region, lse aside
  const int64_t block = (2 * C + split / t) * whole + H / t * whole_stat + C * part + 2 * norm_stats * part_stat;
  const int64_t recomputable = recomputable_values_per_token(c, tp) * whole;
  // Rebuilding, the second norm's part waits to be gathered beside the first gathered input.
  const int64_t rebuild_peak = sp ? 2 * C * whole + std::max(C * part, F / t * whole) : recomputable;
  // An MoE block (nn/moe.h) keeps its attention half as a dense block does; in place of the MLP's
  // F-wide tensors: the router's probabilities E, log-sum-exp 1 and gates k (statistics); the
  // choices, slots and the token and choice of each row sent, 4k i32 values; the expert outputs
  // back here k·C; and the local experts' padded rows, E·capacity of them over the ep group, each
  // holding its input C, first projection F (SwiGLU: and up F) and activation F. Experts are not
  // split over tp. Selective recomputation drops only norm1's output. Between the halves of a split
  // backward the layer keeps what its weight gradients read (nn/moe.h): the router's input, norm2
  // out C, and the local experts' rows' input C and activation F, beside attention's inputs.
  const int64_t E = c.moe_experts, k = c.moe_top_k, expert_rows = E * c.moe_capacity(tokens);
  const int64_t moe_block = (2 * C + (W3 + C) / t) * whole + H / t * whole_stat + C * part +
                            2 * norm_stats * part_stat + (E + 1 + k) * whole_stat + 4 * k * tokens * 4 +
                            k * C * whole + expert_rows * (C + mlp_values * F) * value;
  for (int l = 0; l < c.n_layer; ++l) {
    if (c.is_moe_layer(l)) {
      // Under sp the layer's output [B, T, C] waits for the reduce-scatter like a projection's.
      bytes.push_back({.own = moe_block,
                       .output = C * part,
                       .recomputable = C * whole,
                       .weight_half = (2 * C + C / t) * whole + expert_rows * (C + F) * value,
                       // Attention's qkv and projection, the layer's incoming gradient, the router's
                       // logits' (f32), and each local expert row's projections'.
                       .weight_half_gradients = (W3 / t + 2 * C) * whole + E * whole_stat +
                                                expert_rows * (gated * F + C) * value,
                       .forward_transient = reduce_scatter_input,
                       .rebuild_peak = C * whole,
                       .exact = H / t * whole_stat + 2 * norm_stats * part_stat + (E + 1 + k) * whole_stat +
                                4 * k * tokens * 4});
      continue;
    }
    bytes.push_back({.own = block,
                     .output = C * part,
                     .recomputable = recomputable,
                     .selective_forward = selective_forward_values_per_token(c, tp) * whole,
                     .weight_half = (2 * C + (C + F) / t) * whole,
                     // qkv's, attention's projection's, the MLP's first projections' and its last's.
                     .weight_half_gradients = (W3 / t + C + gated * F / t + C) * whole,
                     .forward_transient = reduce_scatter_input,
                     .rebuild_peak = rebuild_peak,
                     .exact = H / t * whole_stat + 2 * norm_stats * part_stat,
                     .sign_only = c.mlp_activation() == Activation::Relu ? F / t * whole : 0});
  }
  const int64_t head_own = (C + Vt) * whole + whole_stat + norm_stats * part_stat;
  // The norm's part beside the gathered input, if that outweighs the logits and losses to come.
  const int64_t head_transient = sp ? std::max<int64_t>(0, C * part - (Vt * whole + whole_stat)) : 0;
  bytes.push_back({.own = head_own, .weight_half = (C + Vt) * whole, .forward_transient = head_transient,
                   .exact = whole_stat + norm_stats * part_stat});
  return bytes;
}

int64_t saved_activation_bytes(const ModelConfig& c, int64_t B, int64_t T, int tp, bool sp, DType activations) {
  int64_t total = 0;
  for (const UnitActivationBytes& u : unit_activation_bytes(c, B, T, tp, sp, activations)) total += u.own + u.output;
  return total;
}

}  // namespace tessera::config
