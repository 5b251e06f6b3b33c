#include "nn/norm.h"

#include "ops/norm.h"

namespace tessera::nn {

namespace {
// The leading dimensions of x: the shape of its per-row statistics.
Shape rows_shape(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 1); }
}  // namespace

Norm::Norm(ParameterStore& store, const std::string& name, int channels, Kind kind, bool bias, float eps)
    : kind_(kind), channels_(channels), eps_(eps) {
  weight_ = &store.declare(name + ".weight", {channels}, ParameterRole::NormGain, Init::Ones);
  if (bias && kind == Kind::LayerNorm) bias_ = &store.declare(name + ".bias", {channels}, ParameterRole::Bias, Init::Zeros);
}

void Norm::run_forward(StepContext& step, Ctx& ctx, const Tensor& y) {
  if (kind_ == Kind::LayerNorm) {
    ops::layernorm_forward(y, ctx.mean, ctx.rstd, ctx.inp, step.weight(*weight_),
                           bias_ ? step.weight(*bias_) : Tensor(), eps_);
  } else {
    ops::rmsnorm_forward(y, ctx.rstd, ctx.inp, step.weight(*weight_), eps_);
  }
}

Tensor Norm::forward(StepContext& step, Ctx& ctx, const Tensor& x) {
  Tensor y = step.activation(x.shape());  // [N.., C]
  ctx.inp = x;
  ctx.rstd = step.statistics(rows_shape(x));
  if (kind_ == Kind::LayerNorm) ctx.mean = step.statistics(rows_shape(x));
  run_forward(step, ctx, y);
  return y;
}

Tensor Norm::recompute_output(StepContext& step, Ctx& ctx) {
  TS_CHECK(ctx.inp.defined(), "norm: recomputing the output of a forward that kept nothing");
  Tensor y = step.activation(ctx.inp.shape());
  run_forward(step, ctx, y);
  return y;
}

Tensor Norm::backward(StepContext& step, Ctx& ctx, const Tensor& dy) {
  Tensor dx = step.workspace(dy.shape());
  if (kind_ == Kind::LayerNorm) {
    ops::layernorm_backward(dx, step.grad(*weight_), bias_ ? step.grad(*bias_) : Tensor(), dy, ctx.inp,
                            step.weight(*weight_), ctx.mean, ctx.rstd);
  } else {
    ops::rmsnorm_backward(dx, step.grad(*weight_), dy, ctx.inp, step.weight(*weight_), ctx.rstd);
  }
  ctx = Ctx{};
  return dx;
}

}  // namespace tessera::nn
