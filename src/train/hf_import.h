#pragma once
// Import of a folder in the Hugging Face layout (train/hf_layout.h), as `tessera export --format hf`
// writes it and as GPT-2 and Llama models are published:
//   config.json            model_type "gpt2" (GPT2LMHeadModel), "llama" (LlamaForCausalLM) or
//                          "mixtral" (MixtralForCausalLM: a Llama with experts), sizes
//   model.safetensors      the weights; or shards model-0000N-of-0000M.safetensors with
//                          model.safetensors.index.json, whose weight_map names each tensor's shard.
//                          F32, BF16 or F16, read as f32. Names may lack the "transformer." or
//                          "model." prefix (checkpoints saved from the base model, as GPT-2's own).
//   tokenizer.model        optional: the SentencePiece model (`tessera sample` needs it)
// Tensors the model has no place for (buffers such as GPT-2's attention masks) are left out, and
// the note says which. For a Mixtral model the note also says how tessera's forward differs from
// MixtralForCausalLM's (train/hf_layout.h: mixtral_forward_differences).
#include <string>

#include "config/model_config.h"
#include "train/checkpoint.h"

namespace tessera::train {

// Whether `path` is a folder in the Hugging Face layout: it holds config.json (and is not a
// checkpoint folder). Its weights are not looked at yet: a folder without them is this reader's
// error to give.
bool is_hf_folder(const std::string& path);

// The model the folder's config.json describes (train/hf_layout.h: model_config_from_hf); a file
// that is missing, too large or not JSON is an error naming it.
config::ModelConfig read_hf_model_config(const std::string& folder);

// The folder's weights into `state`, whose model must equal the one config.json describes: another
// is refused listing every differing key with both values and the fix (as load_weights does), and
// so is a model without biases (model.bias = false) whose GPT-2 biases in the folder are not zero.
// Missing weights, a shard the index names that is not there, a tensor missing or of another shape
// or dtype are errors naming the tensor and the file. Returns the folder as `path`, its
// tokenizer.model if it has one, and in `note` the tensors it left out.
LoadedWeights load_hf_weights(const std::string& folder, const config::ModelConfig& model, const ModelState& state);

}  // namespace tessera::train
