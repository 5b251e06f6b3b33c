#pragma once
// One transformer block (pre-norm):
//   x = x + dropout(attn(norm1(x)))
//   x = x + dropout(mlp(norm2(x)))
#include "nn/attention.h"
#include "nn/mlp.h"
#include "nn/norm.h"

namespace tessera::nn {

class Block {
 public:
  Block() = default;
  Block(ParameterStore& store, int layer, const config::ModelConfig& config);

  struct Ctx {
    Norm::Ctx norm1;
    Attention::Ctx attn;
    Norm::Ctx norm2;
    Mlp::Ctx mlp;
    uint64_t dropout_offset = 0;  // first mask index of this microbatch
  };
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& x);   // [B, T, C] -> [B, T, C]
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy);  // -> dx [B, T, C]

 private:
  // Residual-branch dropout in place on `branch`; masks keyed by (layer, site, step, sample).
  void dropout(StepContext& step, Tensor& branch, int site, uint64_t offset, bool backward) const;

  Tensor branch_gradient(StepContext& step, const Tensor& dy, int site, uint64_t offset) const;

  int layer_ = 0;
  float dropout_ = 0.0f;
  Norm norm1_;
  Attention attn_;
  Norm norm2_;
  Mlp mlp_;
};

}  // namespace tessera::nn
