#include "nn/attention.h"

#include <cmath>

#include "ops/attention.h"

namespace tessera::nn {

Attention::Attention(ParameterStore& store, const std::string& name, const config::ModelConfig& config)
    : n_head_(config.n_head),
      n_kv_head_(config.kv_heads()),
      channels_(config.n_embd),
      rotary_(config.arch == config::Architecture::Llama),
      rope_theta_(config.rope_theta) {
  const int C = config.n_embd;
  // GPT-2: projections into the residual stream are scaled by 1/sqrt(2L) so its variance does not
  // grow with depth.
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  qkv_ = Linear(store, name + ".qkv", C, config.qkv_dim(), config.bias, 0.02f);
  proj_ = Linear(store, name + ".proj", C, C, config.bias, residual_std);
  // A tensor-parallel plan gives this rank a block of the query heads and the same share of the
  // key/value heads (of q's, k's and v's rows alike), so each group stays whole on one rank.
  const int parts = qkv_.weight().spec.parts(0);
  n_head_ = config.n_head / parts;
  n_kv_head_ = config.kv_heads() / parts;
  width_ = n_head_ * config.head_dim();
  kv_width_ = n_kv_head_ * config.head_dim();
  TS_CHECK(qkv_.out_features() == width_ + 2 * kv_width_ && proj_.in_features() == width_,
           "attention '{}': {} heads and {} key/value heads of this rank do not match its projections ({} and {} "
           "features)",
           name, n_head_, n_kv_head_, qkv_.out_features(), proj_.in_features());
}

Tensor Attention::forward(StepContext& step, Ctx& ctx, const Tensor& x) {
  x.expect_shape({-1, -1, channels_}, "attention input");
  const Tensor whole = step.enter_region(x);  // [B, T, C]: the whole sequences (x may be a part of each)
  const int64_t B = whole.size(0), T = whole.size(1), W = width_, H = n_head_, W3 = width_ + 2 * kv_width_;
  Tensor qkv = qkv_.forward(step, ctx.qkv_proj, whole);  // [B, T, W3]
  if (rotary_) {
    Tensor rotated = step.activation({B, T, W3});
    ops::rope_forward(rotated, qkv, n_head_, n_kv_head_, rope_theta_);
    qkv = rotated;  // the unrotated projection is freed here: backward needs only what attention read
  }
  ctx.qkv = qkv;
  ctx.out = step.activation({B, T, W});
  ctx.lse = step.statistics({B, H, T});
  ops::attention_forward(ctx.out, ctx.lse, qkv, n_head_, n_kv_head_);
  return proj_.forward_leaving(step, ctx.out_proj, ctx.out);  // [B, Ts, C]
}

Tensor Attention::decode(StepContext& step, const Tensor& x, const Tensor& keys, const Tensor& values, int64_t past) {
  x.expect_shape({-1, -1, channels_}, "attention input");
  const int64_t B = x.size(0), T = x.size(1), W = width_;
  Linear::Ctx scratch;
  Tensor qkv = qkv_.forward(step, scratch, step.enter_region(x));  // [B, T, W3]
  if (rotary_) ops::rope_forward(qkv, qkv, n_head_, n_kv_head_, rope_theta_, past);  // in place: nothing else reads it
  Tensor out = step.activation({B, T, W});
  ops::attention_decode(out, keys, values, qkv, past, n_head_, n_kv_head_);
  return proj_.forward_leaving(step, scratch, out);  // [B, T, C]
}

Tensor Attention::backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part) {
  if (part == BackwardPart::Weight) {
    proj_.backward_leaving(step, ctx.out_proj, Tensor(), part);
    qkv_.backward(step, ctx.qkv_proj, Tensor(), part);
    return Tensor();
  }
  const int64_t B = ctx.qkv.size(0), T = ctx.qkv.size(1), W3 = width_ + 2 * kv_width_;
  Tensor dout = proj_.backward_leaving(step, ctx.out_proj, dy, part);  // [B, T, W]
  Tensor dqkv = step.workspace({B, T, W3});
  ops::attention_backward(dqkv, dout, ctx.qkv, ctx.out, ctx.lse, n_head_, n_kv_head_);
  if (rotary_) ops::rope_backward(dqkv, dqkv, n_head_, n_kv_head_, rope_theta_);  // in place: the rotation is orthogonal
  ctx.qkv = Tensor();
  ctx.out = Tensor();
  ctx.lse = Tensor();
  return step.enter_region_backward(qkv_.backward(step, ctx.qkv_proj, dqkv, part));  // [B, Ts, C]
}

}  // namespace tessera::nn
