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
  Zeros,       // a GPT-2 bias that a model without biases (model.bias = false) lacks: zero in the file
};

struct HfTensor {
  std::string name;   // e.g. "transformer.h.0.attn.c_attn.weight"
  std::string param;  // e.g. "blocks.0.attn.qkv.weight"; for Zeros the one a model with biases has
  HfMapping mapping = HfMapping::Same;
  Shape shape;        // in the Hugging Face file
  int64_t row_begin = 0, row_end = 0;  // Rows only
};

// Every tensor of the Hugging Face model that holds `model` (dense, and GPT-2 without grouped-query
// attention: the export refuses the others, the import compares configs first), in file order.
// Together they cover each of the model's parameters exactly once.
std::vector<HfTensor> hf_tensors(const config::ModelConfig& model);

// Why the Hugging Face classes cannot hold `model`'s MLP, or nothing: HF's GPT-2 MLP is ungated
// (activation_function "gelu_new", "relu" or "relu2"), its Llama MLP always gated (SwiGLU).
std::optional<std::string> hf_activation_refusal(const config::ModelConfig& model);

// "gpt2" / "llama" (config.json's model_type) and "GPT2LMHeadModel" / "LlamaForCausalLM" (its
// architectures).
std::string_view hf_model_type(config::Architecture arch);
std::string_view hf_class_name(config::Architecture arch);

// The config.json key that holds tessera's model key `key` ("n_layer" is Llama's
// "num_hidden_layers"), or "" when the class has none (GPT-2 has no rotary base).
std::string_view hf_config_key(config::Architecture arch, std::string_view key);

// config.json for `model`; a token id below 0 (the tokenizer has none, or there is no tokenizer)
// is written as null.
nlohmann::ordered_json hf_config_json(const config::ModelConfig& model, int32_t bos_id, int32_t eos_id);

// The model a config.json describes (`file` names it in messages): a model_type or architectures
// other than GPT-2's and Llama's, a missing or mistyped size, or a feature tessera's models lack
// (Llama's rope_scaling, an activation other than GPT-2's gelu_new, gelu_pytorch_tanh, relu and
// relu2 or Llama's silu) is an error naming the key and what is supported.
// Keys config.json may leave out take transformers' defaults. Dropout is the training's choice,
// not the weights': 0.
config::ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& file);

}  // namespace tessera::train
