#pragma once
// The block's feed-forward network: GELU MLP (GPT-2: proj(gelu(fc(x)))) or SwiGLU (Llama:
// down(silu(gate(x)) * up(x))), chosen by the architecture.
#include <string>

#include "config/model_config.h"
#include "nn/linear.h"

namespace tessera::nn {

class Mlp {
 public:
  Mlp() = default;
  Mlp(ParameterStore& store, const std::string& name, const config::ModelConfig& config);

  struct Ctx {
    Linear::Ctx fc;    // GELU: fc; SwiGLU: gate
    Linear::Ctx up;    // SwiGLU only
    Linear::Ctx proj;  // GELU: proj; SwiGLU: down
    Tensor pre;        // [N, F] fc output (GELU) or gate output (SwiGLU)
    Tensor up_out;     // [N, F] SwiGLU only
  };
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& x);   // [..., C] -> [..., C]
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy);  // -> dx [..., C]

 private:
  bool swiglu_ = false;
  Linear fc_;    // C -> F (gate for SwiGLU)
  Linear up_;    // C -> F, SwiGLU only
  Linear proj_;  // F -> C
  int ffn_ = 0;
};

}  // namespace tessera::nn
