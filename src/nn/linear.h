#pragma once
// Linear layer y = x·Wᵀ + b, W stored [OC, IC] like PyTorch.
#include <string>

#include "nn/parameters.h"
#include "nn/step_context.h"

namespace tessera::nn {

class Linear {
 public:
  Linear() = default;
  Linear(ParameterStore& store, const std::string& name, int in_features, int out_features, bool bias, float init_std);
  // A linear layer over an existing weight (a head tied to the token embedding).
  Linear(Parameter& weight, int in_features, int out_features);

  struct Ctx {
    Tensor inp;  // [N, IC] (any leading dims)
  };
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& x);   // x [..., IC] -> [..., OC]
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy);  // dy [..., OC] -> dx [..., IC]; dW, db +=
  // Backward without the input gradient (the head's input gradient is still needed; embeddings are not).
  void backward_weights_only(StepContext& step, Ctx& ctx, const Tensor& dy);

  int in_features() const { return in_; }
  int out_features() const { return out_; }

 private:
  Parameter* weight_ = nullptr;  // [OC, IC]
  Parameter* bias_ = nullptr;    // [OC] or null
  int in_ = 0, out_ = 0;
};

// Rows of a tensor whose last dimension is `features`, checked.
int rows_of(const Tensor& t, int features, const char* what);
// Shape of t with its last dimension replaced.
Shape with_last_dim(const Shape& shape, int64_t last);

}  // namespace tessera::nn
