#include "nn/embedding.h"

#include "ops/embedding.h"

namespace tessera::nn {

Embedding::Embedding(ParameterStore& store, const config::ModelConfig& config)
    : vocab_(config.vocab_size), channels_(config.n_embd), max_T_(config.seq_len) {
  // GPT-2 initialization: N(0, 0.02) for both tables.
  tokens_ = &store.declare("embed.tokens.weight", {vocab_, channels_}, ParameterRole::Weight, Init::Normal, 0.02f,
                           ParameterPart::Embedding);
  if (config.arch == config::Architecture::Gpt2) {
    positions_ = &store.declare("embed.positions.weight", {max_T_, channels_}, ParameterRole::Weight, Init::Normal,
                                0.02f, ParameterPart::Embedding);
  }
  first_row_ = tokens_->spec.start(0);
}

Tensor Embedding::forward(StepContext& step, Ctx& ctx, const Tensor& tokens) {
  tokens.expect_shape({-1, -1}, "embedding tokens");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  TS_CHECK(T >= 1 && T <= max_T_, "sequence length {} exceeds the model's seq_len {}", T, max_T_);
  ctx.tokens = step.activation({B, T}, DType::I32);
  ctx.tokens.copy_from(tokens);
  Tensor out = step.activation({B, T, channels_});  // this rank's rows of the table: a partial sum
  ops::embedding_rows_forward(out, tokens, step.weight(*tokens_), first_row_, vocab_);
  out = step.leave_region(out);  // [B, Ts, C]
  if (positions_) ops::positions_forward(out, position_rows(step, step.weight(*positions_), out.size(1)));
  return out;
}

Tensor Embedding::position_rows(const StepContext& step, const Tensor& table, int64_t local_length) const {
  // Row t of the view is the position of the residual stream's token t on this rank.
  return table.slice(0, step.sequence_shard().first(local_length), max_T_);
}

Tensor Embedding::forward_at(StepContext& step, const Tensor& tokens, int64_t position0) {
  tokens.expect_shape({-1, -1}, "embedding tokens");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  TS_CHECK(T >= 1 && position0 >= 0 && position0 + T <= max_T_,
           "positions {} .. {} are outside the model's seq_len {}: slide the context to fit", position0,
           position0 + T - 1, max_T_);
  Tensor out = step.activation({B, T, channels_});
  // The rows of the position table from position0 on: a contiguous view, so the op sees a table
  // whose row t is position position0 + t.
  const Tensor positions = positions_ ? step.weight(*positions_).slice(0, position0, max_T_) : Tensor();
  ops::embedding_forward(out, tokens, step.weight(*tokens_), positions);
  return out;
}

void Embedding::backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part) {
  if (part == BackwardPart::Input) {
    ctx.dy = dy;
    return;
  }
  const Tensor& grad = part == BackwardPart::Weight ? ctx.dy : dy;  // [B, Ts, C]
  if (positions_) ops::positions_backward(position_rows(step, step.grad(*positions_), grad.size(1)), grad);
  ops::embedding_rows_backward(step.grad(*tokens_), step.leave_region_backward(grad), ctx.tokens, first_row_);
  ctx = Ctx{};
}

}  // namespace tessera::nn
