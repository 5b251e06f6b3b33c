#include "nn/norm.h"

#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"
#include "nn/linear.h"

namespace tessera::nn {

Norm::Norm(ParameterStore& store, const std::string& name, int channels, Kind kind, bool bias, float eps)
    : kind_(kind), channels_(channels), eps_(eps) {
  weight_ = &store.declare(name + ".weight", {channels}, Init::Ones);
  if (bias && kind == Kind::LayerNorm) bias_ = &store.declare(name + ".bias", {channels}, Init::Zeros);
}

Tensor Norm::forward(StepContext& step, Ctx& ctx, const Tensor& x) {
  const int N = rows_of(x, channels_, "norm input");
  Tensor y = step.activation(x.shape());
  ctx.inp = x;
  ctx.rstd = step.activation({N});
  if (kind_ == Kind::LayerNorm) {
    ctx.mean = step.activation({N});
    kernels::layernorm_forward(y.data<float>(), ctx.mean.data<float>(), ctx.rstd.data<float>(), x.data<float>(),
                               weight_->value.data<float>(), bias_ ? bias_->value.data<float>() : nullptr, N,
                               channels_, eps_);
  } else {
    kernels::rmsnorm_forward(y.data<float>(), ctx.rstd.data<float>(), x.data<float>(), weight_->value.data<float>(), N,
                             channels_, eps_);
  }
  return y;
}

Tensor Norm::backward(StepContext& step, Ctx& ctx, const Tensor& dy) {
  const int N = rows_of(dy, channels_, "norm output gradient");
  Tensor dx = step.workspace(dy.shape());
  if (kind_ == Kind::LayerNorm) {
    kernels::layernorm_backward(dx.data<float>(), weight_->grad.data<float>(),
                                bias_ ? bias_->grad.data<float>() : nullptr, dy.data<float>(), ctx.inp.data<float>(),
                                weight_->value.data<float>(), ctx.mean.data<float>(), ctx.rstd.data<float>(), N,
                                channels_);
  } else {
    kernels::rmsnorm_backward(dx.data<float>(), weight_->grad.data<float>(), dy.data<float>(), ctx.inp.data<float>(),
                              weight_->value.data<float>(), ctx.rstd.data<float>(), N, channels_);
  }
  ctx = Ctx{};
  return dx;
}

}  // namespace tessera::nn
