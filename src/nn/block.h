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
    bool recomputable_dropped = false;
  };
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& x);  // [B, T, C] -> [B, T, C]
  // dy [B, T, C] -> dx [B, T, C] (undefined for the weight half).
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part);

  // Selective recomputation: after forward, drop the saved tensors that are large and cost one
  // elementwise pass to rebuild — the two norm outputs and the MLP activation, 2C + F values per
  // token (the tiled attention keeps no T×T scores, so these are the big cheap part here). The
  // backward rebuilds them first, to the same bits.
  static void drop_recomputable(Ctx& ctx);
  static int64_t recomputable_values_per_token(const config::ModelConfig& config);

 private:
  void restore_recomputable(StepContext& step, Ctx& ctx);
  // Residual-branch dropout in place on `branch`; masks keyed by (layer, site, step, sample).
  void dropout(StepContext& step, const Tensor& branch, int site, uint64_t offset, bool backward) const;
  Tensor branch_gradient(StepContext& step, const Tensor& dy, int site, uint64_t offset) const;

  int layer_ = 0;
  float dropout_ = 0.0f;
  Norm norm1_;
  Attention attn_;
  Norm norm2_;
  Mlp mlp_;
};

}  // namespace tessera::nn
