#pragma once
// Causal multi-head self-attention: qkv projection, (rotary positions), attention, output
// projection. The attention kernel is the tiled one: it saves only the output and the
// log-sum-exp of each query row, never the T×T probabilities.
#include <string>

#include "config/model_config.h"
#include "nn/linear.h"

namespace tessera::nn {

class Attention {
 public:
  Attention() = default;
  Attention(ParameterStore& store, const std::string& name, const config::ModelConfig& config);

  // Under tensor parallelism a rank runs H/tp of the heads and Hkv/tp of the key/value heads:
  // W = (H/tp)·hd and Wkv = (Hkv/tp)·hd below (W = C in one process), W3 = W + 2·Wkv.
  struct Ctx {
    Linear::Ctx qkv_proj;  // inp: the attention's input x [B, T, C]
    Tensor qkv;            // [B, T, W3] after rotary positions (Llama): what attention read
    Tensor out;            // [B, T, W] attention output before the projection
    Tensor lse;            // [B, H/tp, T] f32: log-sum-exp of the scaled scores
    Linear::Ctx out_proj;
    template <class F>
    void for_each_tensor(F&& f) const {
      qkv_proj.for_each_tensor(f);
      f(qkv, SavedUse::Values);
      f(out, SavedUse::Values);
      f(lse, SavedUse::Statistics);
      out_proj.for_each_tensor(f);
    }
  };
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& x);  // [B, T, C] -> [B, T, C]
  // dy [B, T, C] -> dx [B, T, C] (undefined for the weight half).
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part);
  // Decoding with a cache: x [B, T, C] holds T new tokens at positions past .. past + T - 1. Their
  // keys and values (rotated, for Llama) go into keys and values [B, S, Wkv], this layer's cache,
  // whose first `past` positions hold the earlier tokens'; the new tokens attend to all of them.
  // -> [B, T, C]. Inference only: keeps nothing.
  Tensor decode(StepContext& step, const Tensor& x, const Tensor& keys, const Tensor& values, int64_t past);

 private:
  Linear qkv_;   // C -> W3
  Linear proj_;  // W -> C
  int n_head_ = 0, n_kv_head_ = 0, channels_ = 0;  // this rank's heads and key/value heads; C
  int width_ = 0, kv_width_ = 0;                   // W, Wkv
  bool rotary_ = false;
  float rope_theta_ = 10000.0f;
};

}  // namespace tessera::nn
