#include "nn/gpt.h"

#include <algorithm>

#include "ops/loss.h"

namespace tessera::nn {

Tensor token_tensor(const int32_t* tokens, int B, int T) {
  return Tensor::from_external(const_cast<int32_t*>(tokens), {B, T}, DType::I32);
}

GPT::GPT(const config::ModelConfig& config, MemoryAccountant& memory, uint64_t seed, const ShardingRules* sharding)
    : config_(config), params_(sharding) {
  config_.validate();
  // Each unit owns the parameters declared while it is built: a contiguous range of the flat buffer.
  auto unit = [this](std::string name, UnitKind kind, auto&& build) {
    const int64_t begin = params_.numel();
    build();
    units_.push_back(Unit{std::move(name), kind, {{begin, params_.numel()}}, {begin, params_.numel()}});
  };
  unit("embed", UnitKind::Embedding, [&] { embed_ = Embedding(params_, config_); });
  blocks_.reserve(static_cast<size_t>(config_.n_layer));
  for (int l = 0; l < config_.n_layer; ++l) {
    unit("blocks." + std::to_string(l), UnitKind::Block, [&] { blocks_.emplace_back(params_, l, config_); });
  }
  unit("head", UnitKind::Head, [&] {
    norm_ = Norm(params_, "norm", config_.n_embd, Norm::kind_for(config_.arch), config_.bias, config_.norm_eps);
    if (config_.tied_embeddings) {
      head_ = Linear(embed_.token_weight());
    } else {
      head_ = Linear(params_, "head", config_.n_embd, config_.vocab_size, false, 0.02f);
    }
  });
  if (config_.tied_embeddings) {
    const Parameter& wte = embed_.token_weight();
    const auto begin = static_cast<int64_t>(wte.offset);
    units_.back().params.push_back({begin, begin + wte.numel()});
  }
  int64_t declared = 0;  // in the one-process model, whatever block of each parameter this rank holds
  for (const Parameter& p : params_.all()) declared += shape_numel(p.spec.unpadded_shape());
  TS_CHECK(declared == config_.parameter_count(), "the model declares {} parameters but the config formula counts {}",
           declared, config_.parameter_count());
  params_.allocate(memory);
  params_.initialize(seed);
}

GPT::UnitOutput GPT::head_forward(StepContext& step, HeadCtx& ctx, const Tensor& x, const Microbatch& mb) {
  const int64_t B = mb.targets.size(0), T = mb.targets.size(1);  // x [B, Ts, C] may hold a part of each sequence
  UnitOutput out;
  const int32_t* targets = mb.targets.data<int32_t>();
  for (int64_t i = 0; i < B * T; ++i) out.counted += targets[i] != kIgnoreIndex;
  Tensor h = step.enter_region(norm_.forward(step, ctx.norm, x));  // [B, T, C], whole sequences
  // The head's rows may be a block of the vocabulary (a tensor-parallel plan's): the loss combines
  // its row statistics over the region instead of gathering the logits.
  const Parameter& w = head_.weight();
  const int64_t rows = w.shape[0], first = w.spec.start(0);
  const ops::VocabBlock block{first, std::clamp<int64_t>(config_.vocab_size - first, 0, rows), config_.vocab_size};
  ops::VocabReductions reductions;
  if (step.region != nullptr) {
    reductions.max = [&](std::span<float> v) { step.region->max_over_group(v); };
    reductions.sum = [&](std::span<float> v) { step.region->sum_over_group(v); };
  }
  if (step.training) {
    ctx.dlogits = head_.forward(step, ctx.proj, h);  // [B, T, V] logits, turned into their gradient below
    ctx.losses = step.statistics({B, T});
    out.loss_sum = ops::vocab_parallel_cross_entropy(ctx.dlogits, ctx.losses, mb.targets, kIgnoreIndex, mb.grad_scale,
                                                     block, reductions);
  } else {
    Tensor logits = head_.forward(step, ctx.proj, h);  // [B, T, V]
    Tensor losses = step.workspace({B, T}, DType::F32);
    out.loss_sum = ops::vocab_parallel_cross_entropy(logits, losses, mb.targets, kIgnoreIndex, 1.0f, block, reductions);
    ctx = HeadCtx{};
  }
  return out;
}

GPT::UnitOutput GPT::forward_unit(StepContext& step, int unit, UnitCtx& ctx, const Tensor& x, const Microbatch& mb,
                                  Save save) {
  TS_CHECK(unit >= 0 && unit < num_units(), "unit {} outside the chain of {} units", unit, num_units());
  switch (units_[static_cast<size_t>(unit)].kind) {
    case UnitKind::Embedding:
      return {embed_.forward(step, ctx.embed, mb.tokens)};  // [B, T, C]
    case UnitKind::Block: {
      const bool keep_recomputable = save == Save::All || !step.training;
      return {blocks_[static_cast<size_t>(unit - 1)].forward(step, ctx.block, x, keep_recomputable)};  // [B, T, C]
    }
    case UnitKind::Head:
      return head_forward(step, ctx.head, x, mb);
  }
  TS_FAIL("unit {} has no kind", unit);
}

Tensor GPT::backward_unit(StepContext& step, int unit, UnitCtx& ctx, const Tensor& dy, BackwardPart part) {
  TS_CHECK(unit >= 0 && unit < num_units(), "unit {} outside the chain of {} units", unit, num_units());
  switch (units_[static_cast<size_t>(unit)].kind) {
    case UnitKind::Embedding:
      embed_.backward(step, ctx.embed, dy, part);
      return Tensor();
    case UnitKind::Block:
      return blocks_[static_cast<size_t>(unit - 1)].backward(step, ctx.block, dy, part);
    case UnitKind::Head: {
      HeadCtx& head = ctx.head;
      if (part == BackwardPart::Weight) {
        head_.backward(step, head.proj, Tensor(), part);
        return Tensor();
      }
      TS_CHECK(head.dlogits.defined(), "the head's backward without a training forward (or run twice)");
      Tensor dh = head_.backward(step, head.proj, head.dlogits, part);  // [B, T, C]; dW_head (or dwte) +=
      head.dlogits = Tensor();
      head.losses = Tensor();
      return norm_.backward(step, head.norm, step.enter_region_backward(dh));
    }
  }
  TS_FAIL("unit {} has no kind", unit);
}

double GPT::forward(StepContext& step, Ctx& ctx, const int32_t* tokens, const int32_t* targets, int B, int T,
                    float grad_scale) {
  const Microbatch mb{token_tensor(tokens, B, T), token_tensor(targets, B, T), grad_scale};
  ctx.units.assign(units_.size(), UnitCtx{});
  Tensor x;
  double loss_sum = 0;
  for (int u = 0; u < num_units(); ++u) {
    UnitOutput out = forward_unit(step, u, ctx.units[static_cast<size_t>(u)], x, mb);
    x = out.y;
    loss_sum += out.loss_sum;
  }
  return loss_sum;
}

void GPT::backward(StepContext& step, Ctx& ctx) {
  TS_CHECK(!ctx.units.empty(), "GPT::backward without a training forward (or called twice)");
  Tensor dx;
  for (int u = head_unit(); u >= 0; --u) dx = backward_unit(step, u, ctx.units[static_cast<size_t>(u)], dx,
                                                            BackwardPart::Both);
  ctx.units.clear();
}

double GPT::evaluate(StepContext& step, const int32_t* tokens, const int32_t* targets, int B, int T, int64_t* count) {
  StepContext eval = step;
  eval.training = false;
  const Microbatch mb{token_tensor(tokens, B, T), token_tensor(targets, B, T), 1.0f};
  Tensor x;
  UnitOutput out;
  for (int u = 0; u < num_units(); ++u) {
    UnitCtx scratch;  // evaluation keeps nothing: each unit's saved tensors go as soon as it is done
    out = forward_unit(eval, u, scratch, x, mb);
    x = out.y;
  }
  *count = out.counted;
  return out.loss_sum;
}

Tensor GPT::logits(StepContext& step, const int32_t* tokens, int B, int T) {
  StepContext eval = step;
  eval.training = false;
  const Microbatch mb{token_tensor(tokens, B, T), Tensor(), 1.0f};
  Tensor x;
  for (int u = 0; u < head_unit(); ++u) {
    UnitCtx scratch;
    x = forward_unit(eval, u, scratch, x, mb).y;
  }
  HeadCtx head;
  Tensor h = norm_.forward(eval, head.norm, x);  // [B, T, C]
  return head_.forward(eval, head.proj, h);      // [B, T, V]
}

GPT::KVCache GPT::make_kv_cache(MemoryAccountant& memory, int B) const {
  TS_CHECK(B >= 1, "a decoding cache needs at least one sequence, got B = {}", B);
  KVCache cache;
  for (int l = 0; l < config_.n_layer; ++l) {
    cache.keys.push_back(Tensor::empty({B, config_.seq_len, config_.kv_dim()}, DType::F32, MemoryTag::Activations, memory));
    cache.values.push_back(Tensor::empty({B, config_.seq_len, config_.kv_dim()}, DType::F32, MemoryTag::Activations, memory));
  }
  return cache;
}

Tensor GPT::decode(StepContext& step, KVCache& cache, const int32_t* tokens, int B, int T) {
  TS_CHECK(static_cast<int>(cache.keys.size()) == config_.n_layer && B == cache.keys[0].size(0),
           "decode: the cache was made for {} layers and {} sequences, the model has {} layers and the call {} "
           "sequences; make it with make_kv_cache",
           cache.keys.size(), cache.keys.empty() ? 0 : cache.keys[0].size(0), config_.n_layer, B);
  TS_CHECK(T >= 1 && cache.length + T <= config_.seq_len,
           "decode: {} cached and {} new positions exceed the model's seq_len {}; slide the context and start the "
           "cache over",
           cache.length, T, config_.seq_len);
  StepContext eval = step;
  eval.training = false;
  Tensor x = embed_.forward_at(eval, token_tensor(tokens, B, T), cache.length);  // [B, T, C]
  for (int l = 0; l < config_.n_layer; ++l) {
    const auto i = static_cast<size_t>(l);
    x = blocks_[i].decode(eval, x, cache.keys[i], cache.values[i], cache.length);
  }
  cache.length += T;
  // Only the last position's logits are needed: the head's [C, V] product runs on one row per sequence.
  Tensor last = eval.activation({B, 1, config_.n_embd});
  last.copy_from(x.slice(1, T - 1, T));
  HeadCtx head;
  Tensor h = norm_.forward(eval, head.norm, last);                          // [B, 1, C]
  return head_.forward(eval, head.proj, h).reshape({B, config_.vocab_size});  // [B, V]
}

std::vector<GPT::UnitBytes> GPT::unit_activation_bytes(const config::ModelConfig& c, int B, int T, int tp, bool sp,
                                                       DType activations) {
  // Values kept per token, each an activation (4 bytes in f32, 2 in bf16 or f16) or a statistic
  // (4 bytes whatever the dtype: the norms' mean and rstd, attention's lse, the losses, token ids):
  //   embedding: its own copy of the token ids 1; output C (the first block's input)
  //   block, GPT-2: norm1 out C + mean 1 + rstd 1; qkv 3C; attention out C + lse H; residual x1 C;
  //                 norm2 out C + 2; fc out F; gelu out F            = 7C + 2F + H + 4; output C
  //   block, Llama: norm1 out C + rstd 1; rotated qkv 3C (the unrotated one is freed at once);
  //                 attention out C + lse H; residual C; norm2 out C + 1; gate F; up F; swiglu out F
  //                                                                  = 7C + 3F + H + 2; output C
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
  const int64_t tokens = int64_t{B} * T, part_tokens = int64_t{B} * (T / (sp ? t : 1));
  const int64_t whole = tokens * value;      // bytes of one activation per token of the microbatch
  const int64_t part = part_tokens * value;  // ... per token of this rank's residual stream
  const int64_t whole_stat = tokens * 4, part_stat = part_tokens * 4;  // one statistic per token
  const bool gpt2 = c.arch == config::Architecture::Gpt2;
  const int64_t norm_stats = gpt2 ? 2 : 1;
  const int64_t reduce_scatter_input = sp ? C * whole : 0;
  std::vector<UnitBytes> bytes;
  bytes.push_back({.own = 1 * whole_stat, .output = C * part, .weight_half = 1 * whole_stat,
                   .forward_transient = reduce_scatter_input});
  const int64_t split = gpt2 ? W3 + C + 2 * F : W3 + C + 3 * F;  // activations inside the region, lse aside
  const int64_t block = (2 * C + split / t) * whole + H / t * whole_stat + C * part + 2 * norm_stats * part_stat;
  const int64_t recomputable = Block::recomputable_values_per_token(c, tp) * whole;
  // Rebuilding, the second norm's part waits to be gathered beside the first gathered input.
  const int64_t rebuild_peak = sp ? 2 * C * whole + std::max(C * part, F / t * whole) : recomputable;
  for (int l = 0; l < c.n_layer; ++l) {
    bytes.push_back({.own = block,
                     .output = C * part,
                     .recomputable = recomputable,
                     .selective_forward = Block::selective_forward_values_per_token(c, tp) * whole,
                     .weight_half = (2 * C + (C + F) / t) * whole,
                     .forward_transient = reduce_scatter_input,
                     .rebuild_peak = rebuild_peak});
  }
  const int64_t head_own = (C + Vt) * whole + whole_stat + norm_stats * part_stat;
  // The norm's part beside the gathered input, if that outweighs the logits and losses to come.
  const int64_t head_transient = sp ? std::max<int64_t>(0, C * part - (Vt * whole + whole_stat)) : 0;
  bytes.push_back({.own = head_own, .weight_half = (C + Vt) * whole, .forward_transient = head_transient});
  return bytes;
}

int64_t GPT::saved_activation_bytes(const config::ModelConfig& c, int B, int T, int tp, bool sp, DType activations) {
  int64_t total = 0;
  for (const UnitBytes& u : unit_activation_bytes(c, B, T, tp, sp, activations)) total += u.own + u.output;
  return total;
}

}  // namespace tessera::nn
