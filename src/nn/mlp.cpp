#include "nn/mlp.h"

#include <cmath>

#include "ops/activation.h"
#include "ops/elementwise.h"

namespace tessera::nn {

void activation_forward(config::Activation a, const Tensor& act, const Tensor& pre, const Tensor& up) {
  switch (a) {
    case config::Activation::Gelu: ops::gelu_forward(act, pre); return;
    case config::Activation::Relu: ops::relu_forward(act, pre); return;
    case config::Activation::Relu2: ops::relu2_forward(act, pre); return;
    case config::Activation::Swiglu: ops::swiglu_forward(act, pre, up); return;
  }
}

void activation_backward(config::Activation a, const Tensor& dpre, const Tensor& dup, const Tensor& dact,
                         const Tensor& pre, const Tensor& up) {
  switch (a) {
    case config::Activation::Gelu: ops::gelu_backward(dpre, pre, dact); return;
    case config::Activation::Relu: ops::relu_backward(dpre, pre, dact); return;
    case config::Activation::Relu2: ops::relu2_backward(dpre, pre, dact); return;
    case config::Activation::Swiglu: ops::swiglu_backward(dpre, dup, dact, pre, up); return;
  }
}

Mlp::Mlp(ParameterStore& store, const std::string& name, const config::ModelConfig& config)
    : activation_(config.mlp_activation()) {
  const int C = config.n_embd, F = config.ffn();
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  if (activation_ == config::Activation::Swiglu) {
    fc_ = Linear(store, name + ".gate", C, F, config.bias, 0.02f);
    up_ = Linear(store, name + ".up", C, F, config.bias, 0.02f);
    proj_ = Linear(store, name + ".down", F, C, config.bias, residual_std);
  } else {
    fc_ = Linear(store, name + ".fc", C, F, config.bias, 0.02f);
    proj_ = Linear(store, name + ".proj", F, C, config.bias, residual_std);
  }
}

Tensor Mlp::forward(StepContext& step, Ctx& ctx, Tensor x, bool keep_recomputable) {
  x = step.enter_region(x);
  ctx.pre = fc_.forward(step, ctx.fc, x);  // [N.., F]
  if (activation_ == config::Activation::Swiglu) ctx.up_out = up_.forward(step, ctx.up, x);  // [N.., F]
  if (!keep_recomputable) {
    x = Tensor();
    ctx.fc.inp = Tensor();
    ctx.up.inp = Tensor();
  }
  Tensor y = proj_.forward_leaving(step, ctx.proj, recompute_activation(step, ctx));  // [N.., C]
  if (!keep_recomputable) ctx.proj.inp = Tensor();
  // A ReLU's backward reads only where its input was positive, unless a selective backward rebuilds
  // the activation from it.
  ctx.pre_use = activation_ == config::Activation::Relu && keep_recomputable ? SavedUse::Sign : SavedUse::Values;
  return y;
}

Tensor Mlp::recompute_activation(StepContext& step, const Ctx& ctx) const {
  Tensor act = step.activation(ctx.pre.shape());  // [N.., F]
  activation_forward(activation_, act, ctx.pre, ctx.up_out);
  return act;
}

Tensor Mlp::backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part) {
  if (part == BackwardPart::Weight) {
    proj_.backward_leaving(step, ctx.proj, Tensor(), part);
    if (activation_ == config::Activation::Swiglu) up_.backward(step, ctx.up, Tensor(), part);
    fc_.backward(step, ctx.fc, Tensor(), part);
    return Tensor();
  }
  Tensor dact = proj_.backward_leaving(step, ctx.proj, dy, part);  // [N.., F]
  Tensor dpre = step.workspace(dact.shape());
  Tensor dx;
  if (activation_ == config::Activation::Swiglu) {
    Tensor dup = step.workspace(dact.shape());
    activation_backward(activation_, dpre, dup, dact, ctx.pre, ctx.up_out);
    ctx.pre = Tensor();
    ctx.up_out = Tensor();
    dx = up_.backward(step, ctx.up, dup, part);
    Tensor dx_gate = fc_.backward(step, ctx.fc, dpre, part);
    ops::add_inplace(dx, dx_gate);
  } else {
    activation_backward(activation_, dpre, Tensor(), dact, ctx.pre, Tensor());
    ctx.pre = Tensor();
    dx = fc_.backward(step, ctx.fc, dpre, part);
  }
  return step.enter_region_backward(dx);
}

}  // namespace tessera::nn
