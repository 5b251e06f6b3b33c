#include "nn/gpt.h"

#include <algorithm>

#include "ops/loss.h"

namespace tessera::nn {

Tensor token_tensor(const int32_t* tokens, int B, int T) {
  return Tensor::from_external(const_cast<int32_t*>(tokens), {B, T}, DType::I32);
}

GPT::GPT(const config::ModelConfig& config, MemoryAccountant& memory, uint64_t seed, const ShardingRules* sharding,
         bool deferred_values)
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
  if (deferred_values) {
    params_.allocate_deferred(memory, seed);
    return;
  }
  params_.allocate(memory);
  params_.initialize(seed);
}

std::vector<Shape> GPT::linear_weight_shapes() const {
  std::vector<Shape> shapes;
  for (const Parameter& p : params_.all()) {
    if (p.role == ParameterRole::Weight && p.part == ParameterPart::Dense && p.shape.size() == 2 &&
        &p != &head_.weight()) {
      shapes.push_back(p.shape);
    }
  }
  shapes.push_back(head_.weight().shape);  // the token embedding's block when tied
  return shapes;
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
  // Losses a block adds of its own (an MoE router's) take this microbatch's scale.
  step.grad_scale = mb.grad_scale;
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

}  // namespace tessera::nn
