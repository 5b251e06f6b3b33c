#include "nn/mlp.h"

#include <cmath>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/swiglu.h"

namespace tessera::nn {

Mlp::Mlp(ParameterStore& store, const std::string& name, const config::ModelConfig& config)
    : swiglu_(config.arch == config::Architecture::Llama), ffn_(config.ffn()) {
  const int C = config.n_embd, F = config.ffn();
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  if (swiglu_) {
    fc_ = Linear(store, name + ".gate", C, F, config.bias, 0.02f);
    up_ = Linear(store, name + ".up", C, F, config.bias, 0.02f);
    proj_ = Linear(store, name + ".down", F, C, config.bias, residual_std);
  } else {
    fc_ = Linear(store, name + ".fc", C, F, config.bias, 0.02f);
    proj_ = Linear(store, name + ".proj", F, C, config.bias, residual_std);
  }
}

Tensor Mlp::forward(StepContext& step, Ctx& ctx, const Tensor& x) {
  ctx.pre = fc_.forward(step, ctx.fc, x);  // [..., F]
  Tensor act = step.activation(ctx.pre.shape());
  if (swiglu_) {
    ctx.up_out = up_.forward(step, ctx.up, x);  // [..., F]
    kernels::swiglu_forward(act.data<float>(), ctx.pre.data<float>(), ctx.up_out.data<float>(),
                            static_cast<size_t>(act.numel()));
  } else {
    kernels::gelu_forward(act.data<float>(), ctx.pre.data<float>(), static_cast<size_t>(act.numel()));
  }
  return proj_.forward(step, ctx.proj, act);  // [..., C]
}

Tensor Mlp::backward(StepContext& step, Ctx& ctx, const Tensor& dy) {
  Tensor dact = proj_.backward(step, ctx.proj, dy);  // [..., F]
  Tensor dpre = step.workspace(dact.shape());
  const auto n = static_cast<size_t>(dact.numel());
  Tensor dx;
  if (swiglu_) {
    Tensor dup = step.workspace(dact.shape());
    kernels::swiglu_backward(dpre.data<float>(), dup.data<float>(), dact.data<float>(), ctx.pre.data<float>(),
                             ctx.up_out.data<float>(), n);
    ctx.pre = Tensor();
    ctx.up_out = Tensor();
    dx = up_.backward(step, ctx.up, dup);
    Tensor dx_gate = fc_.backward(step, ctx.fc, dpre);
    kernels::add_inplace(dx.data<float>(), dx_gate.data<float>(), static_cast<size_t>(dx.numel()));
  } else {
    kernels::gelu_backward(dpre.data<float>(), ctx.pre.data<float>(), dact.data<float>(), n);
    ctx.pre = Tensor();
    dx = fc_.backward(step, ctx.fc, dpre);
  }
  return dx;
}

}  // namespace tessera::nn
