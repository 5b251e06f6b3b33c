#include "nn/block.h"

#include "core/rng.h"
#include "ops/elementwise.h"

namespace tessera::nn {

Block::Block(ParameterStore& store, int layer, const config::ModelConfig& config)
    : layer_(layer), dropout_(config.dropout) {
  const std::string name = "blocks." + std::to_string(layer);
  const Norm::Kind kind = Norm::kind_for(config.arch);
  norm1_ = Norm(store, name + ".norm1", config.n_embd, kind, config.bias, config.norm_eps);
  attn_ = Attention(store, name + ".attn", config);
  norm2_ = Norm(store, name + ".norm2", config.n_embd, kind, config.bias, config.norm_eps);
  moe_layer_ = config.is_moe_layer(layer);
  if (moe_layer_) {
    moe_ = MoeFeedForward(store, name + ".moe", config);
  } else {
    mlp_ = Mlp(store, name + ".mlp", config);
  }
}

void Block::dropout(StepContext& step, const Tensor& branch, int site, uint64_t offset, bool backward) const {
  if (dropout_ == 0.0f || !step.training) return;
  const uint64_t stream =
      stream_id("dropout:residual") ^ (static_cast<uint64_t>(layer_) << 40) ^ (static_cast<uint64_t>(site) << 32) ^
      (step.step * 0x9E3779B97F4A7C15ull);
  auto apply = [&](const Tensor& part, uint64_t first_index) {
    if (backward) {
      ops::dropout_backward(part, part, dropout_, step.seed, stream, first_index);
    } else {
      ops::dropout_forward(part, part, dropout_, step.seed, stream, first_index);
    }
  };
  // A mask element is keyed by its index in the whole microbatch [B, T, C], so a rank holding a
  // part of each sequence draws the same mask values as one process: sequence by sequence, from
  // its part's first position.
  const SequenceShard shard = step.sequence_shard();
  if (shard.parts == 1) {
    apply(branch, offset);
    return;
  }
  const int64_t B = branch.size(0), Ts = branch.size(1), C = branch.size(2), T = Ts * shard.parts;
  for (int64_t b = 0; b < B; ++b) {
    apply(branch.slice(0, b, b + 1), offset + static_cast<uint64_t>((b * T + shard.first(Ts)) * C));
  }
}

Tensor Block::forward(StepContext& step, Ctx& ctx, const Tensor& x, bool keep_recomputable) {
  // The first mask index of this microbatch's sequences: values per sequence of the whole [B, T, C].
  const int64_t values_per_sequence = x.size(1) * step.sequence_shard().parts * x.size(2);
  ctx.dropout_offset = static_cast<uint64_t>(step.sample_offset * values_per_sequence);
  Tensor h = norm1_.forward(step, ctx.norm1, x);  // [B, Ts, C]
  Tensor x1 = attn_.forward(step, ctx.attn, h);   // [B, Ts, C], the branch; becomes the residual stream
  // norm1's output: the qkv projection's context holds what it read (the same tensor, or under
  // sequence parallelism the whole sequences gathered from it), which selective recomputation drops.
  h = Tensor();
  if (!keep_recomputable) ctx.attn.qkv_proj.inp = Tensor();
  dropout(step, x1, 0, ctx.dropout_offset, false);
  ops::add_inplace(x1, x);
  Tensor x2 = moe_layer_ ? moe_.forward(step, ctx.moe, norm2_.forward(step, ctx.norm2, x1))
                         : mlp_.forward(step, ctx.mlp, norm2_.forward(step, ctx.norm2, x1), keep_recomputable);  // [B, Ts, C]
  dropout(step, x2, 1, ctx.dropout_offset, false);
  ops::add_inplace(x2, x1);
  ctx.recomputable_dropped = !keep_recomputable;
  return x2;
}

Tensor Block::decode(StepContext& step, const Tensor& x, const Tensor& keys, const Tensor& values, int64_t past) {
  Norm::Ctx n1, n2;
  Mlp::Ctx m;
  MoeFeedForward::Ctx e;
  Tensor x1 = attn_.decode(step, norm1_.forward(step, n1, x), keys, values, past);  // [B, T, C]
  ops::add_inplace(x1, x);
  Tensor x2 = moe_layer_ ? moe_.forward(step, e, norm2_.forward(step, n2, x1))
                         : mlp_.forward(step, m, norm2_.forward(step, n2, x1));  // [B, T, C]
  ops::add_inplace(x2, x1);
  return x2;
}

void Block::restore_recomputable(StepContext& step, Ctx& ctx) {
  // What the projections read: the norms' outputs, entering the region again (under sequence
  // parallelism, gathered again over the group).
  ctx.attn.qkv_proj.inp = step.enter_region(norm1_.recompute_output(step, ctx.norm1));
  ctx.recomputable_dropped = false;
  if (moe_layer_) return;
  const Tensor h2 = step.enter_region(norm2_.recompute_output(step, ctx.norm2));
  ctx.mlp.fc.inp = h2;
  if (ctx.mlp.up_out.defined()) ctx.mlp.up.inp = h2;
  ctx.mlp.proj.inp = mlp_.recompute_activation(step, ctx.mlp);
}

Tensor Block::branch_gradient(StepContext& step, const Tensor& dy, int site, uint64_t offset) const {
  if (dropout_ == 0.0f || !step.training) return dy;  // the branch sees the residual gradient as is
  Tensor d = step.workspace(dy.shape());
  d.copy_from(dy);
  dropout(step, d, site, offset, true);
  return d;
}

Tensor Block::backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part) {
  if (part == BackwardPart::Weight) {
    if (moe_layer_) {
      moe_.backward(step, ctx.moe, Tensor(), part);
    } else {
      mlp_.backward(step, ctx.mlp, Tensor(), part);
    }
    attn_.backward(step, ctx.attn, Tensor(), part);
    return Tensor();
  }
  if (ctx.recomputable_dropped) restore_recomputable(step, ctx);
  Tensor dh2 = moe_layer_ ? moe_.backward(step, ctx.moe, branch_gradient(step, dy, 1, ctx.dropout_offset), part)
                          : mlp_.backward(step, ctx.mlp, branch_gradient(step, dy, 1, ctx.dropout_offset), part);
  Tensor dx1 = norm2_.backward(step, ctx.norm2, dh2);
  ops::add_inplace(dx1, dy);  // the residual path
  Tensor dh = attn_.backward(step, ctx.attn, branch_gradient(step, dx1, 0, ctx.dropout_offset), part);
  Tensor dx = norm1_.backward(step, ctx.norm1, dh);
  ops::add_inplace(dx, dx1);
  return dx;
}

}  // namespace tessera::nn
