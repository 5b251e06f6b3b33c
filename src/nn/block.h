#pragma once
// One transformer block (pre-norm):
//   x = x + dropout(attn(norm1(x)))
//   x = x + dropout(mlp(norm2(x)))      (an MoE block: moe(norm2(x)), nn/moe.h)
#include "nn/attention.h"
#include "nn/mlp.h"
#include "nn/moe.h"
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
    MoeFeedForward::Ctx moe;
    uint64_t dropout_offset = 0;  // first mask index of this microbatch
    bool recomputable_dropped = false;
    template <class F>
    void for_each_tensor(F&& f) const {
      norm1.for_each_tensor(f);
      attn.for_each_tensor(f);
      norm2.for_each_tensor(f);
      mlp.for_each_tensor(f);
      moe.for_each_tensor(f);
    }
  };
  // [B, T, C] -> [B, T, C]. Selective recomputation (keep_recomputable false) drops the tensors
  // config::recomputable_values_per_token counts (an MoE block only norm1's output: its layer keeps
  // what it routed) as soon as the ops that read them are done; the backward
  // rebuilds them first, to the same bits.
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& x, bool keep_recomputable = true);
  // dy [B, T, C] -> dx [B, T, C] (undefined for the weight half).
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part);
  // Decoding with a cache (Attention::decode): x [B, T, C], new tokens at positions past .. past +
  // T - 1; keys, values [B, S, Hkv·D] this layer's cache. -> [B, T, C]. Inference only: no dropout,
  // nothing kept.
  Tensor decode(StepContext& step, const Tensor& x, const Tensor& keys, const Tensor& values, int64_t past);

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
  Mlp mlp_;             // a dense block's
  MoeFeedForward moe_;  // an MoE block's
  bool moe_layer_ = false;
};

}  // namespace tessera::nn
