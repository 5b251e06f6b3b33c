#pragma once
// The GPT model: a straight chain embedding → blocks → final norm → head → loss, built from a
// ModelConfig (GPT-2 style or Llama style). It holds no parallel code: data, tensor and pipeline
// parallelism, recomputation and ZeRO are applied from outside by the interpreter (exec/), which
// runs the chain unit by unit (forward_unit / backward_unit) in the order a schedule gives.
// forward() and backward() below are the same chain as one straight list, for one microbatch.
//
// Shapes: B batch, T sequence, C n_embd, F ffn, H n_head, V vocab, L n_layer.
#include <vector>

#include "config/model_config.h"
#include "nn/block.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/parameters.h"
#include "nn/step_context.h"
#include "nn/unit.h"

namespace tessera::nn {

class GPT {
 public:
  // Declares every parameter, allocates the flat parameter and gradient buffers from `memory`
  // and initializes them GPT-2 style from `seed`. `sharding` (kept; may be null) gives this rank
  // its blocks of the parameters a tensor-parallel plan splits (parallel/tensor_parallel.h):
  // the model declares the one-process shapes and runs on the blocks it gets; the values are
  // those of the one-process model's elements at their global index.
  // `deferred_values`: no buffer of the whole values; their holder makes each parameter's initial
  // values as it stores them (ParameterStore::allocate_deferred).
  GPT(const config::ModelConfig& config, MemoryAccountant& memory, uint64_t seed,
      const ShardingRules* sharding = nullptr, bool deferred_values = false);

  static constexpr int kIgnoreIndex = -1;

  // What the ends of the chain read for one microbatch.
  struct Microbatch {
    Tensor tokens;           // [B, T] i32
    Tensor targets;          // [B, T] i32 (kIgnoreIndex skips a position)
    float grad_scale = 1.0f;  // the gradient is that of grad_scale × (sum of token losses)
  };

  // What one unit keeps between its forward and its backward for one microbatch.
  struct HeadCtx {
    Norm::Ctx norm;
    Linear::Ctx proj;
    Tensor dlogits;  // [B, T, V]: the fused loss writes the logits' gradient here during forward
    Tensor losses;   // [B, T] f32 per-token losses (0 where the target is ignored)
    template <class F>
    void for_each_tensor(F&& f) const {
      norm.for_each_tensor(f);
      proj.for_each_tensor(f);
      f(dlogits, SavedUse::Values);
      f(losses, SavedUse::Statistics);
    }
  };
  // What a unit saved for its backward: the values of the program that recomputation drops,
  // offloading moves to another tier and the backward reads (exec/activation_offload.h).
  struct UnitCtx {
    Embedding::Ctx embed;
    Block::Ctx block;
    HeadCtx head;
    // Every tensor it holds, once per view (views may share a storage), with how its backward reads it.
    std::vector<SavedTensor> saved() const {
      std::vector<SavedTensor> out;
      const auto take = [&](const Tensor& t, SavedUse use) {
        if (t.defined()) out.push_back({t, use});
      };
      embed.for_each_tensor(take);
      block.for_each_tensor(take);
      head.for_each_tensor(take);
      return out;
    }
  };

  enum class Save {
    All,        // keep everything backward needs
    Selective,  // blocks drop what is cheap to rebuild (Block::forward with keep_recomputable false); others keep all
  };

  struct UnitOutput {
    Tensor y;              // [B, T, C]; undefined for the head
    double loss_sum = 0;   // head: sum of the token losses
    int64_t counted = 0;   // head: targets that count (not ignored)
  };
  // The forward of `unit` for one microbatch: the embedding reads mb.tokens, the others x [B, T, C].
  // Training (step.training): the unit keeps in ctx what its backward needs, and the head computes
  // its loss and the logits' gradient in one fused pass. Evaluation: nothing is kept.
  UnitOutput forward_unit(StepContext& step, int unit, UnitCtx& ctx, const Tensor& x, const Microbatch& mb,
                          Save save = Save::All);
  // dy [B, T, C] (ignored by the head) -> dx [B, T, C]: the gradient of the unit's input (undefined
  // for the embedding and for the weight half). Parameter gradients accumulate (+=). After the
  // last half (Both or Weight) ctx holds nothing.
  Tensor backward_unit(StepContext& step, int unit, UnitCtx& ctx, const Tensor& dy, BackwardPart part);

  // The chain as one straight list for one microbatch, without a schedule or transforms.
  struct Ctx {
    std::vector<UnitCtx> units;
  };
  // Training forward over tokens[B*T] with targets[B*T]. Returns the SUM of token losses over
  // counted targets; the gradient that backward() accumulates is that of grad_scale × sum
  // (grad_scale = 1 / tokens in the global batch gives the mean).
  double forward(StepContext& step, Ctx& ctx, const int32_t* tokens, const int32_t* targets, int B, int T,
                 float grad_scale);
  // Accumulates (+=) parameter gradients and releases everything forward saved.
  void backward(StepContext& step, Ctx& ctx);
  // Evaluation: sum of token losses and their count, nothing saved.
  double evaluate(StepContext& step, const int32_t* tokens, const int32_t* targets, int B, int T, int64_t* count);
  // Logits [B, T, V] of a whole context (sampling without a cache; the reference of decode()).
  Tensor logits(StepContext& step, const int32_t* tokens, int B, int T);

  // Decoding with a key/value cache: every layer's keys and values of the tokens seen so far, so a
  // new token costs one token's forward instead of the whole context's.
  struct KVCache {
    std::vector<Tensor> keys, values;  // per layer [B, S, Hkv·D], S = seq_len (tag activations)
    int64_t length = 0;                // positions filled; set to 0 to start over
  };
  KVCache make_kv_cache(MemoryAccountant& memory, int B) const;
  // Runs tokens [B, T] (T >= 1) at positions cache.length .. cache.length + T - 1, which must lie
  // within seq_len, appends their keys and values to the cache, and returns the logits of the last
  // of them [B, V]: row cache.length + T - 1 of logits() over the whole context, up to rounding.
  // A prompt goes in one call (prefill), then one token per call.
  Tensor decode(StepContext& step, KVCache& cache, const int32_t* tokens, int B, int T);

  const std::vector<Unit>& units() const { return units_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  int head_unit() const { return num_units() - 1; }

  ParameterStore& parameters() { return params_; }
  const ParameterStore& parameters() const { return params_; }
  // [out, in] of every weight that multiplies all of a microbatch's rows, this rank's blocks: the
  // blocks' linear layers and the head, once per use. An MoE layer's experts are not listed: each
  // multiplies only the rows routed to it.
  std::vector<Shape> linear_weight_shapes() const;
  const config::ModelConfig& config() const { return config_; }

  // The activation bytes each unit keeps are a function of the shapes alone:
  // config::unit_activation_bytes (config/activation_bytes.h), which tests hold the allocator's
  // measured peak to.

 private:
  UnitOutput head_forward(StepContext& step, HeadCtx& ctx, const Tensor& x, const Microbatch& mb);

  config::ModelConfig config_;
  ParameterStore params_;
  Embedding embed_;
  std::vector<Block> blocks_;
  Norm norm_;
  Linear head_;  // weight tied to the token embedding when config.tied_embeddings
  std::vector<Unit> units_;
};

// A [B, T] i32 tensor over tokens the caller keeps alive (no copy).
Tensor token_tensor(const int32_t* tokens, int B, int T);

}  // namespace tessera::nn
