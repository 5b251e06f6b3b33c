#pragma once
// The block's feed-forward network, by model.activation: ungated proj(act(fc(x))) with act GELU
// (GPT-2's), ReLU or squared ReLU, or gated SwiGLU down(silu(gate(x)) * up(x)) (Llama's). Under
// tensor parallelism F below is this rank's part of the hidden width: the activation is
// elementwise, so it needs no communication.
#include <string>

#include "config/model_config.h"
#include "nn/linear.h"

namespace tessera::nn {

// act [N.., F] = the activation of pre [N.., F] (and, for SwiGLU, up [N.., F]; undefined otherwise).
// The one place the dense MLP and the MoE experts choose their kernels.
void activation_forward(config::Activation a, const Tensor& act, const Tensor& pre, const Tensor& up);
// dpre [N.., F] (and dup for SwiGLU) from dact and the forward's pre (and up); written (=).
void activation_backward(config::Activation a, const Tensor& dpre, const Tensor& dup, const Tensor& dact,
                         const Tensor& pre, const Tensor& up);

class Mlp {
 public:
  Mlp() = default;
  Mlp(ParameterStore& store, const std::string& name, const config::ModelConfig& config);

  struct Ctx {
    Linear::Ctx fc;    // ungated: fc; SwiGLU: gate. inp: the MLP's input x [N.., C]
    Linear::Ctx up;    // SwiGLU only
    Linear::Ctx proj;  // ungated: proj; SwiGLU: down. inp: the activation [N.., F]
    Tensor pre;        // [N.., F] fc output (ungated) or gate output (SwiGLU)
    Tensor up_out;     // [N.., F] SwiGLU only
    SavedUse pre_use = SavedUse::Values;  // how the backward reads pre (Sign: only a ReLU's mask)
    template <class F>
    void for_each_tensor(F&& f) const {
      fc.for_each_tensor(f);
      up.for_each_tensor(f);
      proj.for_each_tensor(f);
      f(pre, pre_use);
      f(up_out, SavedUse::Values);
    }
  };
  // x [N.., C] -> [N.., C]. With keep_recomputable false (selective recomputation) the input and
  // the activation are dropped as soon as the projections read them (x is taken by value so the
  // caller can hand it over): only the activation is held during the forward beyond what stays.
  Tensor forward(StepContext& step, Ctx& ctx, Tensor x, bool keep_recomputable = true);
  // The activation [N.., F] (proj's input) again from pre (and up_out): selective recomputation
  // drops it, as it costs one elementwise pass to rebuild.
  Tensor recompute_activation(StepContext& step, const Ctx& ctx) const;
  // dy [N.., C] -> dx [N.., C] (undefined for the weight half).
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part);

 private:
  config::Activation activation_ = config::Activation::Gelu;
  Linear fc_;    // C -> F (gate for SwiGLU)
  Linear up_;    // C -> F, SwiGLU only
  Linear proj_;  // F -> C
};

}  // namespace tessera::nn
