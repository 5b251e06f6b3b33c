#pragma once
// Token embedding plus learned positions (GPT-2) or tokens only (Llama: positions are rotary).
// A tensor-parallel plan may split the token table by vocabulary rows (Megatron's vocabulary-
// parallel embedding): each rank looks up the tokens it holds, the lookups are summed where the
// region says (StepContext::leave_region), and the positions, which every rank holds, join once.
#include "config/model_config.h"
#include "nn/parameters.h"
#include "nn/step_context.h"

namespace tessera::nn {

class Embedding {
 public:
  Embedding() = default;
  Embedding(ParameterStore& store, const config::ModelConfig& config);

  struct Ctx {
    Tensor tokens;  // [B, T] i32, kept for the backward scatter
    Tensor dy;      // [B, Ts, C]: the output gradient, kept by the input half for the weight half
    template <class F>
    void for_each_tensor(F&& f) const {
      f(tokens, SavedUse::Values);
      f(dy, SavedUse::Values);
    }
  };
  // tokens [B, T] i32 -> [B, Ts, C] (Ts: the part of each sequence the residual stream holds on
  // this rank, nn/tensor_region.h). Token ids outside [0, V) raise an error naming id and position.
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& tokens);
  // dy [B, Ts, C]; dwte, dwpe +=. Tokens have no gradient: the input half only keeps dy for the
  // weight half, which does the scatter.
  void backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part);
  // Inference for decoding with a cache: tokens [B, T] at positions position0 .. position0 + T - 1
  // (within seq_len) -> [B, T, C]. Keeps nothing.
  Tensor forward_at(StepContext& step, const Tensor& tokens, int64_t position0);

  const Parameter& token_weight() const { return *tokens_; }

 private:
  // The rows of a position table [Tmax, C] (values or gradients) of this rank's part of the
  // sequence, local_length long: a view from its first position on.
  Tensor position_rows(const StepContext& step, const Tensor& table, int64_t local_length) const;

  const Parameter* tokens_ = nullptr;     // [V, C] (this rank's rows of it)
  const Parameter* positions_ = nullptr;  // [Tmax, C] or null
  int vocab_ = 0, channels_ = 0, max_T_ = 0;
  int64_t first_row_ = 0;  // the token id of this rank's first row
};

}  // namespace tessera::nn
