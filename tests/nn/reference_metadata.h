#pragma once
// The model's shape as the PyTorch references (tests/nn/torch_reference.py and
// float64_reference.py) read it from a safetensors file's metadata.
#include <fmt/format.h>

#include <string>

#include "config/model_config.h"
#include "io/safetensors.h"

namespace tessera::testing {

inline void write_model_metadata(io::SafeTensorsWriter& writer, const config::ModelConfig& c) {
  auto meta = [&](const char* k, const std::string& v) { writer.set_metadata(k, v); };
  meta("arch", config::architecture_name(c.arch));
  meta("n_layer", std::to_string(c.n_layer));
  meta("n_head", std::to_string(c.n_head));
  meta("n_kv_head", std::to_string(c.kv_heads()));
  meta("n_embd", std::to_string(c.n_embd));
  meta("vocab_size", std::to_string(c.vocab_size));
  meta("seq_len", std::to_string(c.seq_len));
  meta("ffn_hidden", std::to_string(c.ffn()));
  meta("bias", c.bias ? "true" : "false");
  meta("tied_embeddings", c.tied_embeddings ? "true" : "false");
  meta("norm_eps", fmt::format("{:.9g}", c.norm_eps));
  meta("rope_theta", fmt::format("{:.9g}", c.rope_theta));
  meta("activation", config::activation_name(c.mlp_activation()));
}

}  // namespace tessera::testing
