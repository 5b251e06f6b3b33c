#pragma once
// The block's normalization: LayerNorm (GPT-2) or RMSNorm (Llama), chosen by the architecture.
// Its gain and bias gradients are by-products of the input gradient, so the input half of the
// backward writes them and the weight half has nothing to do.
#include <string>

#include "config/model_config.h"
#include "nn/parameters.h"
#include "nn/step_context.h"

namespace tessera::nn {

class Norm {
 public:
  enum class Kind { LayerNorm, RMSNorm };
  Norm() = default;
  Norm(ParameterStore& store, const std::string& name, int channels, Kind kind, bool bias, float eps);

  struct Ctx {
    Tensor inp;   // [N.., C]
    Tensor mean;  // [N..] f32 (LayerNorm only)
    Tensor rstd;  // [N..] f32
    template <class F>
    void for_each_tensor(F&& f) const {
      f(inp, SavedUse::Values);
      f(mean, SavedUse::Statistics);
      f(rstd, SavedUse::Statistics);
    }
  };
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& x);  // [N.., C] -> [N.., C]
  // The output again, from what forward saved (the statistics are recomputed to the same bits):
  // selective recomputation drops norm outputs, which cost one pass over the input to rebuild.
  Tensor recompute_output(StepContext& step, Ctx& ctx);
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy);  // -> dx; dweight, dbias +=

  static Kind kind_for(config::Architecture arch) {
    return arch == config::Architecture::Gpt2 ? Kind::LayerNorm : Kind::RMSNorm;
  }

 private:
  void run_forward(StepContext& step, Ctx& ctx, const Tensor& y);

  Kind kind_ = Kind::LayerNorm;
  const Parameter* weight_ = nullptr;  // [C]
  const Parameter* bias_ = nullptr;    // [C] or null
  int channels_ = 0;
  float eps_ = 1e-5f;
};

}  // namespace tessera::nn
