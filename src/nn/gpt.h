#pragma once
// The GPT model: a straight chain embedding → blocks → final norm → head → loss, built from a
// ModelConfig (GPT-2 style or Llama style). It holds no parallel code: data, tensor and pipeline
// parallelism are transforms applied from outside, and pipeline stages, checkpoint segments and
// offload units are ranges of `blocks`.
//
// Shapes: B batch, T sequence, C n_embd, V vocab, L n_layer.
#include <vector>

#include "config/model_config.h"
#include "nn/block.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/parameters.h"
#include "nn/step_context.h"

namespace tessera::nn {

class GPT {
 public:
  // Declares every parameter, allocates the flat parameter and gradient buffers from `memory`
  // and initializes them GPT-2 style from `seed`.
  GPT(const config::ModelConfig& config, MemoryAccountant& memory, uint64_t seed);

  struct Ctx {
    int B = 0, T = 0;
    Embedding::Ctx embed;
    std::vector<Block::Ctx> blocks;
    Norm::Ctx norm;
    Linear::Ctx head;
    Tensor dlogits;  // [B, T, V]: the fused loss writes the logits' gradient here during forward
    Tensor losses;   // [B, T] per-token losses (0 where the target is ignored)
  };

  // Training forward over tokens[B*T] with targets[B*T] (ignore_index -1 skips a position).
  // Returns the SUM of token losses over counted targets; the gradient that backward() accumulates
  // is that of grad_scale × sum (grad_scale = 1 / tokens in the global batch gives the mean).
  double forward(StepContext& step, Ctx& ctx, const int32_t* tokens, const int32_t* targets, int B, int T,
                 float grad_scale);
  // Accumulates (+=) parameter gradients and releases everything forward saved.
  void backward(StepContext& step, Ctx& ctx);

  // Evaluation: sum of token losses and their count, nothing saved.
  double evaluate(StepContext& step, const int32_t* tokens, const int32_t* targets, int B, int T, int64_t* count);
  // Logits [B, T, V] for sampling.
  Tensor logits(StepContext& step, const int32_t* tokens, int B, int T);

  // The chain of units the execution hooks see: 0 embedding, 1..L blocks, L+1 final norm + head.
  const std::vector<Unit>& units() const { return units_; }
  int head_unit() const { return static_cast<int>(units_.size()) - 1; }

  ParameterStore& parameters() { return params_; }
  const ParameterStore& parameters() const { return params_; }
  const config::ModelConfig& config() const { return config_; }

  static constexpr int kIgnoreIndex = -1;

  // Bytes forward() keeps alive for backward, from the shapes alone. The formula, per token
  // (f32 = 4 bytes, i32 tokens = 4 bytes), is written out in gpt.cpp and a test holds the
  // allocator's measured peak of the 'activations' tag to it.
  static int64_t saved_activation_bytes(const config::ModelConfig& config, int B, int T);

 private:
  Tensor forward_hidden(StepContext& step, Ctx& ctx, const int32_t* tokens, int B, int T);  // [B, T, C]

  config::ModelConfig config_;
  ParameterStore params_;
  Embedding embed_;
  std::vector<Block> blocks_;
  Norm norm_;
  Linear head_;  // weight tied to the token embedding when config.tied_embeddings
  std::vector<Unit> units_;
};

}  // namespace tessera::nn
