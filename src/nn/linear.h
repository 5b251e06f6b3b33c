#pragma once
// Linear layer y = x·Wᵀ + b, W stored [OC, IC] like PyTorch. Declared with its one-process sizes;
// when a tensor-parallel plan splits it, IC and OC below are those of this rank's block: the
// output dimension for a column-parallel layer, the input dimension for a row-parallel one.
#include <string>

#include "nn/parameters.h"
#include "nn/step_context.h"

namespace tessera::nn {

class Linear {
 public:
  Linear() = default;
  Linear(ParameterStore& store, const std::string& name, int in_features, int out_features, bool bias, float init_std);
  // A linear layer over an existing weight (a head tied to the token embedding): [OC, IC].
  explicit Linear(const Parameter& weight);

  struct Ctx {
    Tensor inp;  // [N.., IC]
    Tensor dy;   // [N.., OC]: kept by the input half of the backward for the weight half
    template <class F>
    void for_each_tensor(F&& f) const {
      f(inp, SavedUse::Values);
      f(dy, SavedUse::Values);
    }
  };
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& x);  // x [N.., IC] -> [N.., OC]
  // dy [N.., OC] -> dx [N.., IC] (input half and both; undefined for the weight half); dW, db +=.
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part = BackwardPart::Both);

  // The last layer of a tensor-parallel region (row-parallel when the region is split):
  // y = leave(x·Wᵀ) + b, so the partial products are summed first and the bias, which every rank
  // holds, joins once. x [N.., IC] -> [N.., OC].
  Tensor forward_leaving(StepContext& step, Ctx& ctx, const Tensor& x);
  // Its backward: dy [N.., OC] of the residual stream -> dx [N.., IC]. The bias gradient comes from
  // dy, so the input half (or both) writes it.
  Tensor backward_leaving(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part);
  const Parameter& weight() const { return *weight_; }

  int in_features() const { return in_; }
  int out_features() const { return out_; }

 private:
  // The backward of x·Wᵀ, and of the bias `bias` (null: none) when it was added to that product.
  Tensor backward_product(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part, const Parameter* bias);

  const Parameter* weight_ = nullptr;  // [OC, IC]
  const Parameter* bias_ = nullptr;    // [OC] or null
  int in_ = 0, out_ = 0;
};

// Shape of t with its last dimension replaced.
Shape with_last_dim(const Shape& shape, int64_t last);

}  // namespace tessera::nn
