#include "nn/block.h"

#include "core/rng.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/residual.h"

namespace tessera::nn {

Block::Block(ParameterStore& store, int layer, const config::ModelConfig& config)
    : layer_(layer), dropout_(config.dropout) {
  const std::string name = "blocks." + std::to_string(layer);
  const Norm::Kind kind = Norm::kind_for(config.arch);
  norm1_ = Norm(store, name + ".norm1", config.n_embd, kind, config.bias, config.norm_eps);
  attn_ = Attention(store, name + ".attn", config);
  norm2_ = Norm(store, name + ".norm2", config.n_embd, kind, config.bias, config.norm_eps);
  mlp_ = Mlp(store, name + ".mlp", config);
}

void Block::dropout(StepContext& step, Tensor& branch, int site, uint64_t offset, bool backward) const {
  if (dropout_ == 0.0f || !step.training) return;
  const uint64_t stream =
      stream_id("dropout:residual") ^ (static_cast<uint64_t>(layer_) << 40) ^ (static_cast<uint64_t>(site) << 32) ^
      (step.step * 0x9E3779B97F4A7C15ull);
  float* p = branch.data<float>();
  const auto n = static_cast<size_t>(branch.numel());
  if (backward) {
    kernels::dropout_backward(p, p, n, dropout_, step.seed, stream, offset);
  } else {
    kernels::dropout_forward(p, p, n, dropout_, step.seed, stream, offset);
  }
}

Tensor Block::forward(StepContext& step, Ctx& ctx, const Tensor& x) {
  const auto n = static_cast<size_t>(x.numel());
  ctx.dropout_offset = static_cast<uint64_t>(step.sample_offset) * static_cast<uint64_t>(x.numel() / x.size(0));
  Tensor h = norm1_.forward(step, ctx.norm1, x);   // [B, T, C]
  Tensor x1 = attn_.forward(step, ctx.attn, h);    // [B, T, C], the branch; becomes the residual stream
  dropout(step, x1, 0, ctx.dropout_offset, false);
  kernels::add_inplace(x1.data<float>(), x.data<float>(), n);
  Tensor h2 = norm2_.forward(step, ctx.norm2, x1);  // [B, T, C]
  Tensor x2 = mlp_.forward(step, ctx.mlp, h2);      // [B, T, C]
  dropout(step, x2, 1, ctx.dropout_offset, false);
  kernels::add_inplace(x2.data<float>(), x1.data<float>(), n);
  return x2;
}

Tensor Block::branch_gradient(StepContext& step, const Tensor& dy, int site, uint64_t offset) const {
  if (dropout_ == 0.0f || !step.training) return dy;  // the branch sees the residual gradient as is
  Tensor d = step.workspace(dy.shape());
  d.copy_from(dy);
  dropout(step, d, site, offset, true);
  return d;
}

Tensor Block::backward(StepContext& step, Ctx& ctx, const Tensor& dy) {
  const auto n = static_cast<size_t>(dy.numel());
  Tensor dh2 = mlp_.backward(step, ctx.mlp, branch_gradient(step, dy, 1, ctx.dropout_offset));
  Tensor dx1 = norm2_.backward(step, ctx.norm2, dh2);
  kernels::add_inplace(dx1.data<float>(), dy.data<float>(), n);  // the residual path
  Tensor dh = attn_.backward(step, ctx.attn, branch_gradient(step, dx1, 0, ctx.dropout_offset));
  Tensor dx = norm1_.backward(step, ctx.norm1, dh);
  kernels::add_inplace(dx.data<float>(), dx1.data<float>(), n);
  return dx;
}

}  // namespace tessera::nn
