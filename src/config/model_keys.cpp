#include "config/model_keys.h"

#include <fmt/format.h>

#include <vector>

#include "core/check.h"
#include "core/overloaded.h"

namespace tessera::config {

namespace {

std::string architecture(const ModelConfig& m) { return architecture_name(m.arch); }
void set_architecture(ModelConfig& m, const std::string& name) {
  for (const Architecture arch : {Architecture::Gpt2, Architecture::Llama}) {
    if (architecture_name(arch) != name) continue;
    m.arch = arch;
    if (arch == Architecture::Llama) m.bias = false;  // Llama's linears and norms have none
    return;
  }
  TS_FAIL("config: model.arch = '{}' is not known; use \"{}\" or \"{}\"", name, architecture_name(Architecture::Gpt2),
          architecture_name(Architecture::Llama));
}

// Resolved, so that the saved config says which MLP the run trained whatever the defaults become.
std::string resolved_activation(const ModelConfig& m) { return activation_name(m.mlp_activation()); }
void set_activation(ModelConfig& m, const std::string& name) { m.activation = parse_activation(name, "model.activation"); }

bool has_experts(const ModelConfig& m) { return m.moe_experts > 0; }

}  // namespace

std::span<const ModelKey> model_keys() {
  static const std::vector<ModelKey> keys = {
      {.key = "model.arch",
       .field = ModelWord{architecture, set_architecture},
       .doc = "`\"gpt2\"` (LayerNorm, GELU, learned positions) or `\"llama\"` (RMSNorm, SwiGLU, rotary "
              "positions, no biases)"},
      {.key = "model.n_layer",
       .field = &ModelConfig::n_layer,
       .range = Range{1, 100000},
       .doc = "transformer blocks L"},
      {.key = "model.n_head",
       .field = &ModelConfig::n_head,
       .range = Range{1, 100000},
       .doc = "attention heads H (must divide `model.n_embd`)"},
      {.key = "model.n_kv_head",
       .field = &ModelConfig::n_kv_head,
       .doc = "key/value heads Hkv for grouped-query attention (Llama-2-70B, Llama-3): a divisor of "
              "`model.n_head`, each serving n_head/n_kv_head query heads, shrinking the k and v projections and "
              "the decoding cache by that factor; 0 means `model.n_head` (multi-head attention). "
              "`configs/models/llama2-70b.toml` and `llama3-8b.toml` use it"},
      {.key = "model.n_embd",
       .field = &ModelConfig::n_embd,
       .range = Range{1, 1 << 20},
       .doc = "channels C"},
      {.key = "model.vocab_size",
       .field = &ModelConfig::vocab_size,
       .range = Range{2, 1 << 24},
       .default_text = "from the data",
       .doc = "vocabulary V; when left out, the dataset's tokenizer decides it; when given it must hold every "
              "token id of the data"},
      {.key = "model.seq_len",
       .field = &ModelConfig::seq_len,
       .range = Range{1, 1 << 22},
       .doc = "context length T"},
      {.key = "model.ffn_hidden",
       .field = &ModelConfig::ffn_hidden,
       .range = Range{0, 1 << 22},
       .doc = "feed-forward size F; 0 means 4C (ungated MLP) or 8C/3 rounded up to 64 (SwiGLU)"},
      {.key = "model.activation",
       .field = ModelWord{resolved_activation, set_activation},
       .default_text = "the arch's",
       .doc = "the MLP's nonlinearity, on either architecture: `\"gelu\"` (tanh approximation; gpt2's default), "
              "`\"relu\"`, `\"relu2\"` (squared ReLU, Primer) — ungated fc → act → proj — or `\"swiglu\"` "
              "(gated: down(silu(gate) · up); llama's default, a third more MLP weights at the same F). Part of "
              "the model's shape: a resume or `init_from` with another is refused"},
      {.key = "model.bias",
       .field = &ModelConfig::bias,
       .doc = "biases in linear layers and LayerNorm (always off for llama)"},
      {.key = "model.tied_embeddings",
       .field = &ModelConfig::tied_embeddings,
       .doc = "the output head shares the token embedding"},
      {.key = "model.dropout",
       .field = &ModelConfig::dropout,
       .range = Range{.low = 0, .high = 1, .high_open = true, .message = "{key} = {value} must be in [0, 1)"},
       .doc = "dropout on the residual branches"},
      {.key = "model.norm_eps",
       .field = &ModelConfig::norm_eps,
       .range = Range{.low = 0, .high = kFinite, .low_open = true,
                      .message = "{key} = {value} must be a finite positive number"},
       .doc = "epsilon of the norms"},
      {.key = "model.rope_theta",
       .field = &ModelConfig::rope_theta,
       .range = Range{.low = 0, .high = kFinite, .low_open = true,
                      .message = "{key} = {value} must be a finite positive number (the rotary base, 10000 in Llama 2)"},
       // Read by llama models only, but checked for every model: a nan written for a gpt2 run would
       // otherwise wait in the saved config for the day someone switches model.arch.
       .doc = "rotary base (llama)"},
      {.key = "model.moe_experts",
       .field = &ModelConfig::moe_experts,
       .range = Range{0, 1 << 16},
       .doc = "mixture of experts (`docs/moe.md`): E expert MLPs and a router in every `moe_every`-th block; 0 "
              "is a dense model. Under bf16/fp16 the router runs in f32, the experts and their all-to-all in 16 "
              "bits; under `parallel.sp` the layer routes the gathered sequence on every tensor-parallel rank"},
      {.key = "model.moe_top_k",
       .field = &ModelConfig::moe_top_k,
       .range = Range{.low = 1, .high = 2,
                      .message = "{key} = {value} is not supported; use 1 (Switch) or 2 (GShard)"},
       .read_by = has_experts,
       .doc = "experts each token is routed to: 1 (Switch) or 2 (GShard)"},
      {.key = "model.moe_capacity_factor",
       .field = &ModelConfig::moe_capacity_factor,
       .range = Range{.low = 0, .high = 1000, .low_open = true,
                      .message = "{key} = {value} must be a positive number (1.25 is usual; E / k never drops a token)"},
       .read_by = has_experts,
       .doc = "an expert takes at most ceil(factor · tokens · k / E) of a microbatch's tokens; the rest are "
              "dropped and pass through the residual"},
      {.key = "model.moe_every",
       .field = &ModelConfig::moe_every,
       .read_by = has_experts,
       .doc = "blocks moe_every − 1, 2·moe_every − 1, … are MoE blocks"},
      {.key = "model.moe_aux_loss_coef",
       .field = &ModelConfig::moe_aux_loss_coef,
       .range = Range{.low = 0, .high = kFinite,
                      .message = "{key} = {value} must be a finite number >= 0 (0.01 in Switch)"},
       .read_by = has_experts,
       .doc = "weight of the Switch load-balancing loss in the gradient (reported as `moe_aux_loss` in "
              "metrics.jsonl)"},
      {.key = "model.moe_z_loss_coef",
       .field = &ModelConfig::moe_z_loss_coef,
       .range = Range{.low = 0, .high = kFinite,
                      .message = "{key} = {value} must be a finite number >= 0 (0.001 in ST-MoE)"},
       .read_by = has_experts,
       .doc = "weight of the router z-loss (ST-MoE) in the gradient (`moe_z_loss`)"},
  };
  return keys;
}

ModelValue model_key_value(const ModelKey& key, const ModelConfig& m) {
  return std::visit(Overloaded{
                        [&](int ModelConfig::*member) { return ModelValue{int64_t{m.*member}}; },
                        [&](float ModelConfig::*member) { return ModelValue{shortest_decimal(m.*member)}; },
                        [&](bool ModelConfig::*member) { return ModelValue{m.*member}; },
                        [&](ModelWord word) { return ModelValue{word.name(m)}; },
                    },
                    key.field);
}

}  // namespace tessera::config
