#pragma once
// The Hugging Face layout of tessera's models, written once for both directions: the export
// (train/hf_export.h) writes it and the import (train/hf_import.h) reads it back.
//
// Tensors (hf_tensors):
//   GPT-2: transformer.wte / wpe, transformer.h.N.ln_1 / attn.c_attn / attn.c_proj / ln_2 /
//          mlp.c_fc / mlp.c_proj, transformer.ln_f, and lm_head.weight when the head is not tied.
//          GPT-2's Conv1D stores its weight [in, out], the transpose of tessera's Linear [out, in];
//          c_attn keeps tessera's q | k | v order of output columns. The HF model always has
//          biases: a model without them is the one whose biases are zero (the same function).
//   Llama: model.embed_tokens, model.layers.N.input_layernorm / self_attn.{q,k,v,o}_proj /
//          post_attention_layernorm / mlp.{gate,up,down}_proj, model.norm, lm_head when untied.
//          tessera's fused qkv [C + 2·Ckv, C] is q [C, C], k [Ckv, C] and v [Ckv, C] by rows.
//          Rotary positions need no permutation: tessera rotates the pairs (i, i + D/2) of each
//          head ("rotate half"), as HF Llama does.
//   Mixtral (a Llama model with experts): Llama's names, with the MLP of each MoE block replaced
//          by model.layers.N.block_sparse_moe.gate (the router [E, C]) and
//          block_sparse_moe.experts.M.{w1,w3,w2} (expert M's gate [F, C], up [F, C] and down
//          [C, F]): tessera's stacked expert weights [E, ...] split by expert, each [out, in] as
//          nn.Linear holds it. How MixtralForCausalLM's routing differs from tessera's:
//          mixtral_forward_differences.
//
// config.json (hf_config_json, model_config_from_hf): model_type and architectures name the
// model class; the sizes sit under each class's own key names (hf_config_key).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "core/tensor.h"

namespace tessera::train {

// How a tensor of the Hugging Face file holds one of tessera's parameters, or part of it.
enum class HfMapping {
  Same,        // the parameter itself
  Transposed,  // [in, out] for tessera's [out, in] (GPT-2's Conv1D)
  Rows,        // rows [row_begin, row_end) of the parameter (Llama's q, k or v of tessera's qkv)
  Expert,      // block `expert` of a stacked expert parameter [E, ...] (Mixtral's experts.M.w1/w2/w3)
  Zeros,       // a GPT-2 bias that a model without biases (model.bias = false) lacks: zero in the file
};

struct HfTensor {
  std::string name;   // e.g. "transformer.h.0.attn.c_attn.weight"
  std::string param;  // e.g. "blocks.0.attn.qkv.weight"; for Zeros the one a model with biases has
  HfMapping mapping = HfMapping::Same;
  Shape shape;        // in the Hugging Face file
  int64_t row_begin = 0, row_end = 0;  // Rows only
  int64_t expert = 0;                  // Expert only
};

// The Hugging Face model classes tessera's models are written as.
enum class HfModel {
  Gpt2,     // GPT2LMHeadModel: model.arch = "gpt2", dense
  Llama,    // LlamaForCausalLM: model.arch = "llama", dense
  Mixtral,  // MixtralForCausalLM: model.arch = "llama" with experts
};

// The class that holds `model`: by its arch, Mixtral for a Llama with experts. A GPT-2 with
// experts is Gpt2 here, and hf_refusal says why it cannot be written.
HfModel hf_model_of(const config::ModelConfig& model);

// Why no Hugging Face class can hold `model` (a sentence naming the keys and what would work), or
// nothing: GPT-2's MLP is ungated and its attention has no grouped-query heads; Llama's MLP is
// always gated (SwiGLU); GPT-2 has no mixture of experts; Mixtral's layers have no biases and are
// all MoE layers.
std::optional<std::string> hf_refusal(const config::ModelConfig& model);

// Every tensor of the Hugging Face model that holds `model` (one hf_refusal passes: the export
// refuses the others, the import compares configs first), in file order. Together they cover each
// of the model's parameters exactly once.
std::vector<HfTensor> hf_tensors(const config::ModelConfig& model);

// How MixtralForCausalLM's forward of `model`'s weights differs from tessera's (its router
// renormalizes the chosen experts' gates and never drops a token), in sentences for the export's
// and the import's notes; "" for a model without experts.
std::string mixtral_forward_differences(const config::ModelConfig& model);

// "gpt2" / "llama" / "mixtral" (config.json's model_type) and "GPT2LMHeadModel" /
// "LlamaForCausalLM" / "MixtralForCausalLM" (its architectures).
std::string_view hf_model_type(HfModel model);
std::string_view hf_class_name(HfModel model);

// The config.json key that holds tessera's model key `key` ("n_layer" is Llama's
// "num_hidden_layers"), or "" when the class has none (GPT-2 has no rotary base).
std::string_view hf_config_key(HfModel model, std::string_view key);

// config.json for `model`; a token id below 0 (the tokenizer has none, or there is no tokenizer)
// is written as null.
nlohmann::ordered_json hf_config_json(const config::ModelConfig& model, int32_t bos_id, int32_t eos_id);

// The model a config.json describes (`file` names it in messages): a model_type or architectures
// other than GPT-2's, Llama's and Mixtral's, a missing or mistyped size, or a feature tessera's
// models lack (Llama's rope_scaling, Mixtral's sliding_window shorter than the context, an
// activation other than GPT-2's gelu_new, gelu_pytorch_tanh, relu and relu2 or Llama's silu) is
// an error naming the key and what is supported. Keys config.json may leave out take transformers'
// defaults. Dropout is the training's choice, not the weights': 0. A Mixtral model is a Llama with
// moe_experts = num_local_experts, moe_top_k = num_experts_per_tok, an MoE layer in every block,
// and moe_capacity_factor = E / k, the capacity at which no token is dropped, as in Mixtral.
config::ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& file);

}  // namespace tessera::train
