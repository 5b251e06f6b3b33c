#include "nn/linear.h"

#include "ops/elementwise.h"
#include "ops/linear.h"

namespace tessera::nn {

Shape with_last_dim(const Shape& shape, int64_t last) {
  Shape s = shape;
  s.back() = last;
  return s;
}

Linear::Linear(ParameterStore& store, const std::string& name, int in_features, int out_features, bool bias,
               float init_std)
    : Linear(store.declare(name + ".weight", {out_features, in_features}, ParameterRole::Weight, Init::Normal, init_std)) {
  if (bias) bias_ = &store.declare(name + ".bias", {out_features}, ParameterRole::Bias, Init::Zeros);
}

Linear::Linear(const Parameter& weight) : weight_(&weight) {
  TS_CHECK(weight.shape.size() == 2, "linear weight '{}' has shape {}, expected [OC, IC]", weight.name,
           shape_to_string(weight.shape));
  out_ = static_cast<int>(weight.shape[0]);
  in_ = static_cast<int>(weight.shape[1]);
}

Tensor Linear::forward(StepContext& step, Ctx& ctx, const Tensor& x) {
  Tensor y = step.activation(with_last_dim(x.shape(), out_));  // [N.., OC]
  ops::linear_forward(y, x, step.weight(*weight_), bias_ ? step.weight(*bias_) : Tensor());
  ctx.inp = x;
  return y;
}

Tensor Linear::forward_leaving(StepContext& step, Ctx& ctx, const Tensor& x) {
  Tensor y = step.activation(with_last_dim(x.shape(), out_));  // [N.., OC]
  ops::linear_forward(y, x, step.weight(*weight_), Tensor());
  ctx.inp = x;
  y = step.leave_region(y);
  if (bias_) ops::add_bias(y, step.weight(*bias_));
  return y;
}

Tensor Linear::backward_leaving(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part) {
  if (part == BackwardPart::Weight) return backward_product(step, ctx, Tensor(), part, nullptr);
  // The bias joined the residual stream after the reduction: its gradient is the stream's gradient
  // summed over the tokens this rank holds — under sequence parallelism a part of each sequence,
  // whose partial sums the training engine completes over the group like the norms' gains.
  if (bias_) ops::add_bias_backward(step.grad(*bias_), dy);
  return backward_product(step, ctx, step.leave_region_backward(dy), part, nullptr);
}

Tensor Linear::backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part) {
  return backward_product(step, ctx, dy, part, bias_);
}

Tensor Linear::backward_product(StepContext& step, Ctx& ctx, const Tensor& dy_in, BackwardPart part,
                                const Parameter* bias) {
  // The weight half reads the output gradient the input half kept.
  const Tensor dy = part == BackwardPart::Weight ? ctx.dy : dy_in;
  TS_CHECK(dy.defined(), "linear backward: the weight half ran before the input half kept the output gradient");
  const Tensor dbias = bias ? step.grad(*bias) : Tensor();
  Tensor dx;
  if (computes_input_gradient(part)) {
    dx = step.workspace(with_last_dim(dy.shape(), in_));  // [N.., IC]
  }
  switch (part) {
    case BackwardPart::Both:
      ops::linear_backward(dx, step.grad(*weight_), dbias, dy, ctx.inp, step.weight(*weight_));
      ctx = Ctx{};
      break;
    case BackwardPart::Input:
      ops::linear_backward_input(dx, dy, step.weight(*weight_));
      ctx.dy = dy;
      break;
    case BackwardPart::Weight:
      ops::linear_backward_weight(step.grad(*weight_), dbias, dy, ctx.inp);
      ctx = Ctx{};
      break;
  }
  return dx;
}

}  // namespace tessera::nn
