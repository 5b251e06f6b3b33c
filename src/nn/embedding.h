#pragma once
// Token embedding plus learned positions (GPT-2) or tokens only (Llama: positions are rotary).
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
  };
  // tokens [B*T] -> [B, T, C]. Token ids outside [0, V) raise an error naming id and position.
  Tensor forward(StepContext& step, Ctx& ctx, const int32_t* tokens, int B, int T);
  void backward(StepContext& step, Ctx& ctx, const Tensor& dy);  // dy [B, T, C]; dwte, dwpe +=

  Parameter& token_weight() { return *tokens_; }

 private:
  Parameter* tokens_ = nullptr;     // [V, C]
  Parameter* positions_ = nullptr;  // [Tmax, C] or null
  int vocab_ = 0, channels_ = 0, max_T_ = 0;
};

}  // namespace tessera::nn
