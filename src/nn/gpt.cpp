#include "nn/gpt.h"

#include "kernels/cpu/cross_entropy.h"

namespace tessera::nn {

GPT::GPT(const config::ModelConfig& config, MemoryAccountant& memory, uint64_t seed) : config_(config) {
  config_.validate();
  // Each unit owns the parameters declared while it is built: a contiguous range of the flat buffer.
  auto unit = [this](std::string name, auto&& build) {
    const int64_t begin = params_.numel();
    build();
    units_.push_back(Unit{std::move(name), {{begin, params_.numel()}}, {begin, params_.numel()}});
  };
  unit("embed", [&] { embed_ = Embedding(params_, config_); });
  blocks_.reserve(static_cast<size_t>(config_.n_layer));
  for (int l = 0; l < config_.n_layer; ++l) {
    unit("blocks." + std::to_string(l), [&] { blocks_.emplace_back(params_, l, config_); });
  }
  unit("head", [&] {
    norm_ = Norm(params_, "norm", config_.n_embd, Norm::kind_for(config_.arch), config_.bias, config_.norm_eps);
    if (config_.tied_embeddings) {
      head_ = Linear(embed_.token_weight(), config_.n_embd, config_.vocab_size);
    } else {
      head_ = Linear(params_, "head", config_.n_embd, config_.vocab_size, false, 0.02f);
    }
  });
  if (config_.tied_embeddings) {
    const Parameter& wte = embed_.token_weight();
    const auto begin = static_cast<int64_t>(wte.offset);
    units_.back().params.push_back({begin, begin + wte.numel()});
  }
  TS_CHECK(params_.numel() == config_.parameter_count(),
           "the model declares {} parameters but the config formula counts {}", params_.numel(),
           config_.parameter_count());
  params_.allocate(memory);
  params_.initialize(seed);
}

Tensor GPT::forward_hidden(StepContext& step, Ctx& ctx, const int32_t* tokens, int B, int T) {
  ctx.B = B;
  ctx.T = T;
  ctx.blocks.resize(blocks_.size());
  step.before_forward(0);
  Tensor x = embed_.forward(step, ctx.embed, tokens, B, T);  // [B, T, C]
  step.after_forward(0);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const int unit = static_cast<int>(l) + 1;
    step.before_forward(unit);
    x = blocks_[l].forward(step, ctx.blocks[l], x);  // [B, T, C]
    step.after_forward(unit);
  }
  step.before_forward(head_unit());
  return norm_.forward(step, ctx.norm, x);  // [B, T, C]; the head unit ends in the caller
}

double GPT::forward(StepContext& step, Ctx& ctx, const int32_t* tokens, const int32_t* targets, int B, int T,
                    float grad_scale) {
  Tensor h = forward_hidden(step, ctx, tokens, B, T);  // [B, T, C]
  ctx.dlogits = head_.forward(step, ctx.head, h);      // [B, T, V] logits, turned into their gradient below
  ctx.losses = step.activation({B, T});                // [B, T]
  const double loss_sum = kernels::cross_entropy_forward_backward(
      ctx.dlogits.data<float>(), ctx.losses.data<float>(), targets, B * T, config_.vocab_size, kIgnoreIndex, grad_scale);
  step.after_forward(head_unit());
  return loss_sum;
}

void GPT::backward(StepContext& step, Ctx& ctx) {
  TS_CHECK(ctx.dlogits.defined(), "GPT::backward without a training forward (or called twice)");
  step.before_backward(head_unit());
  Tensor dh = head_.backward(step, ctx.head, ctx.dlogits);  // [B, T, C]; dW_head (or dwte) +=
  ctx.dlogits = Tensor();
  ctx.losses = Tensor();
  Tensor dx = norm_.backward(step, ctx.norm, dh);
  step.after_backward(head_unit());
  for (size_t l = blocks_.size(); l-- > 0;) {
    const int unit = static_cast<int>(l) + 1;
    step.before_backward(unit);
    dx = blocks_[l].backward(step, ctx.blocks[l], dx);
    step.after_backward(unit);
  }
  step.before_backward(0);
  embed_.backward(step, ctx.embed, dx);
  step.after_backward(0);
  ctx.blocks.clear();
}

double GPT::evaluate(StepContext& step, const int32_t* tokens, const int32_t* targets, int B, int T,
                     int64_t* count) {
  Tensor logits_bt = logits(step, tokens, B, T);  // [B, T, V]
  Tensor losses = step.workspace({B, T});
  double mean = kernels::cross_entropy_forward(losses.data<float>(), logits_bt.data<float>(), targets, B * T,
                                               config_.vocab_size, kIgnoreIndex, count);
  return mean * static_cast<double>(*count);
}

Tensor GPT::logits(StepContext& step, const int32_t* tokens, int B, int T) {
  Ctx ctx;
  Tensor h = forward_hidden(step, ctx, tokens, B, T);
  Tensor out = head_.forward(step, ctx.head, h);  // [B, T, V]; ctx (and what it saved) goes away here
  step.after_forward(head_unit());
  return out;
}

int64_t GPT::saved_activation_bytes(const config::ModelConfig& c, int B, int T) {
  // What forward() keeps alive for backward, in elements per token (B·T tokens, 4 bytes each):
  //   embedding: token ids 1 (i32), output C (the first block's input)
  //   per block, GPT-2: norm1 out C + mean 1 + rstd 1; qkv 3C; attention out C + lse H;
  //                     residual x1 C; norm2 out C + 2; fc out F; gelu out F; residual x2 C
  //                   = 8C + 2F + H + 4
  //   per block, Llama: norm1 out C + rstd 1; rotated qkv 3C (the unrotated one is freed at once);
  //                     attention out C + lse H; residual C; norm2 out C + 1; gate F; up F;
  //                     swiglu out F; residual C
  //                   = 8C + 3F + H + 2
  //   final norm: out C + rstd 1 (+ mean 1 for LayerNorm); logits (then their gradient) V; losses 1
  const int64_t C = c.n_embd, F = c.ffn(), H = c.n_head, V = c.vocab_size;
  const bool gpt2 = c.arch == config::Architecture::Gpt2;
  const int64_t per_block = gpt2 ? 8 * C + 2 * F + H + 4 : 8 * C + 3 * F + H + 2;
  const int64_t final_norm = C + (gpt2 ? 2 : 1);
  const int64_t per_token = 1 + C + c.n_layer * per_block + final_norm + V + 1;
  return per_token * static_cast<int64_t>(B) * static_cast<int64_t>(T) * 4;
}

}  // namespace tessera::nn
