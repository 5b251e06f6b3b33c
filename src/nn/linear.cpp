#include "nn/linear.h"

#include "kernels/cpu/linear.h"

namespace tessera::nn {

int rows_of(const Tensor& t, int features, const char* what) {
  TS_CHECK(t.dim() >= 1 && t.size(t.dim() - 1) == features, "shape mismatch for {}: last dimension must be {}, got {}",
           what, features, t.shape_string());
  TS_CHECK(t.is_contiguous(), "{} must be contiguous, got a strided view of {}", what, t.shape_string());
  return static_cast<int>(t.numel() / features);
}

Shape with_last_dim(const Shape& shape, int64_t last) {
  Shape s = shape;
  s.back() = last;
  return s;
}

Linear::Linear(ParameterStore& store, const std::string& name, int in_features, int out_features, bool bias,
               float init_std)
    : in_(in_features), out_(out_features) {
  weight_ = &store.declare(name + ".weight", {out_features, in_features}, Init::Normal, init_std);
  if (bias) bias_ = &store.declare(name + ".bias", {out_features}, Init::Zeros);
}

Linear::Linear(Parameter& weight, int in_features, int out_features)
    : weight_(&weight), in_(in_features), out_(out_features) {
  TS_CHECK(weight.shape == Shape({out_features, in_features}), "tied weight '{}' has shape {}, expected [{}, {}]",
           weight.name, shape_to_string(weight.shape), out_features, in_features);
}

Tensor Linear::forward(StepContext& step, Ctx& ctx, const Tensor& x) {
  const int N = rows_of(x, in_, "linear input");
  Tensor y = step.activation(with_last_dim(x.shape(), out_));  // [..., OC]
  kernels::linear_forward(y.data<float>(), x.data<float>(), weight_->value.data<float>(),
                          bias_ ? bias_->value.data<float>() : nullptr, N, in_, out_);
  ctx.inp = x;
  return y;
}

Tensor Linear::backward(StepContext& step, Ctx& ctx, const Tensor& dy) {
  const int N = rows_of(dy, out_, "linear output gradient");
  Tensor dx = step.workspace(with_last_dim(dy.shape(), in_));  // [..., IC]
  kernels::linear_backward(dx.data<float>(), weight_->grad.data<float>(), bias_ ? bias_->grad.data<float>() : nullptr,
                           dy.data<float>(), ctx.inp.data<float>(), weight_->value.data<float>(), N, in_, out_);
  ctx = Ctx{};
  return dx;
}

void Linear::backward_weights_only(StepContext& step, Ctx& ctx, const Tensor& dy) {
  const int N = rows_of(dy, out_, "linear output gradient");
  kernels::linear_backward<float>(nullptr, weight_->grad.data<float>(), bias_ ? bias_->grad.data<float>() : nullptr,
                                  dy.data<float>(), ctx.inp.data<float>(), weight_->value.data<float>(), N, in_, out_);
  ctx = Ctx{};
}

}  // namespace tessera::nn
