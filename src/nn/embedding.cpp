#include "nn/embedding.h"

#include <cstring>

#include "kernels/cpu/embedding.h"

namespace tessera::nn {

Embedding::Embedding(ParameterStore& store, const config::ModelConfig& config)
    : vocab_(config.vocab_size), channels_(config.n_embd), max_T_(config.seq_len) {
  // GPT-2 initialization: N(0, 0.02) for both tables.
  tokens_ = &store.declare("embed.tokens.weight", {vocab_, channels_}, Init::Normal, 0.02f);
  if (config.arch == config::Architecture::Gpt2) {
    positions_ = &store.declare("embed.positions.weight", {max_T_, channels_}, Init::Normal, 0.02f);
  }
}

Tensor Embedding::forward(StepContext& step, Ctx& ctx, const int32_t* tokens, int B, int T) {
  TS_CHECK(T >= 1 && T <= max_T_, "sequence length {} exceeds the model's seq_len {}", T, max_T_);
  Tensor out = step.activation({B, T, channels_});
  kernels::embedding_forward(out.data<float>(), tokens, tokens_->value.data<float>(),
                             positions_ ? positions_->value.data<float>() : nullptr, B, T, channels_, vocab_);
  ctx.tokens = step.activation({B, T}, DType::I32);
  std::memcpy(ctx.tokens.data<int32_t>(), tokens, sizeof(int32_t) * static_cast<size_t>(B) * static_cast<size_t>(T));
  return out;
}

void Embedding::backward(StepContext& step, Ctx& ctx, const Tensor& dy) {
  const int B = static_cast<int>(ctx.tokens.size(0)), T = static_cast<int>(ctx.tokens.size(1));
  dy.expect_shape({B, T, channels_}, "embedding output gradient");
  kernels::embedding_backward(tokens_->grad.data<float>(), positions_ ? positions_->grad.data<float>() : nullptr,
                              dy.data<float>(), ctx.tokens.data<int32_t>(), B, T, channels_);
  ctx = Ctx{};
}

}  // namespace tessera::nn
