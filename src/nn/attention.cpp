#include "nn/attention.h"

#include <cmath>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"

namespace tessera::nn {

Attention::Attention(ParameterStore& store, const std::string& name, const config::ModelConfig& config)
    : n_head_(config.n_head),
      channels_(config.n_embd),
      rotary_(config.arch == config::Architecture::Llama),
      rope_theta_(config.rope_theta) {
  const int C = config.n_embd;
  // GPT-2: projections into the residual stream are scaled by 1/sqrt(2L) so its variance does not
  // grow with depth.
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  qkv_ = Linear(store, name + ".qkv", C, 3 * C, config.bias, 0.02f);
  proj_ = Linear(store, name + ".proj", C, C, config.bias, residual_std);
}

Tensor Attention::forward(StepContext& step, Ctx& ctx, const Tensor& x) {
  x.expect_shape({-1, -1, channels_}, "attention input");
  const int B = static_cast<int>(x.size(0)), T = static_cast<int>(x.size(1)), C = channels_, H = n_head_;
  Tensor qkv = qkv_.forward(step, ctx.qkv_proj, x);  // [B, T, 3C]
  if (rotary_) {
    Tensor rotated = step.activation({B, T, 3 * C});
    kernels::rope_forward(rotated.data<float>(), qkv.data<float>(), B, T, C, H, rope_theta_);
    qkv = rotated;
  }
  ctx.qkv = qkv;
  ctx.out = step.activation({B, T, C});
  ctx.lse = step.activation({B, H, T});
  kernels::attention_forward(ctx.out.data<float>(), ctx.lse.data<float>(), qkv.data<float>(), B, T, C, H);
  return proj_.forward(step, ctx.out_proj, ctx.out);  // [B, T, C]
}

Tensor Attention::backward(StepContext& step, Ctx& ctx, const Tensor& dy) {
  const int B = static_cast<int>(ctx.qkv.size(0)), T = static_cast<int>(ctx.qkv.size(1)), C = channels_, H = n_head_;
  Tensor dout = proj_.backward(step, ctx.out_proj, dy);  // [B, T, C]
  Tensor dqkv = step.workspace({B, T, 3 * C});
  kernels::attention_backward(dqkv.data<float>(), dout.data<float>(), ctx.qkv.data<float>(), ctx.out.data<float>(),
                              ctx.lse.data<float>(), B, T, C, H);
  if (rotary_) {
    Tensor unrotated = step.workspace({B, T, 3 * C});
    kernels::rope_backward(unrotated.data<float>(), dqkv.data<float>(), B, T, C, H, rope_theta_);
    dqkv = unrotated;
  }
  ctx.qkv = Tensor();
  ctx.out = Tensor();
  ctx.lse = Tensor();
  return qkv_.backward(step, ctx.qkv_proj, dqkv);  // [B, T, C]
}

}  // namespace tessera::nn
