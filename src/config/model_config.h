#pragma once
// The [model] section: the one description of a transformer shared by the trainer (nn/), the
// planner and the simulator (plan/). Letters used for shapes throughout tessera:
//   B batch, T sequence length, C = n_embd, H = n_head, D = C/H head size, Hkv = n_kv_head
//   (key/value heads), F = ffn_hidden, V vocab_size, L = n_layer.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/toml_reader.h"

namespace tessera::config {

enum class Architecture {
  Gpt2,   // LayerNorm, GELU MLP, learned positions
  Llama,  // RMSNorm, SwiGLU MLP, rotary positions, no biases
};

// The MLP's nonlinearity. The first three are ungated (proj(act(fc(x))), weights fc and proj);
// SwiGLU is gated (down(silu(gate(x)) · up(x)), weights gate, up and down), a third more weights
// at the same F.
enum class Activation {
  Gelu,    // tanh approximation, GPT-2's
  Relu,
  Relu2,   // squared ReLU, relu(x)^2 (Primer)
  Swiglu,  // Llama's
};

struct ModelConfig {
  Architecture arch = Architecture::Gpt2;
  int n_layer = 4;
  int n_head = 4;
  // Key/value heads: 0 means n_head (multi-head attention); a smaller divisor of n_head is
  // grouped-query attention (Llama-2-70B: 64 heads, 8 kv heads), whose kv cache and k, v
  // projections shrink by n_head / n_kv_head.
  int n_kv_head = 0;
  int n_embd = 256;
  int vocab_size = 256;
  int seq_len = 128;         // maximum context T
  int ffn_hidden = 0;        // F; 0 means the activation's default (4C ungated, ~8C/3 for SwiGLU)
  // Unset means the architecture's own (GELU for GPT-2, SwiGLU for Llama); read it through
  // mlp_activation().
  std::optional<Activation> activation;
  bool bias = true;          // biases in linears and norms
  bool tied_embeddings = true;
  float dropout = 0.0f;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // Mixture of experts (nn/moe.h): with moe_experts E > 0, every moe_every-th block (blocks
  // moe_every - 1, 2·moe_every - 1, ...) replaces its MLP by E expert MLPs of width F and a router
  // that sends each token to its moe_top_k best experts. An expert takes at most
  // ceil(capacity_factor · N · k / E) of a microbatch's N tokens; the rest of its tokens are dropped
  // and pass through the residual. The Switch load-balancing loss and the router z-loss join the
  // gradient with these weights (nn/moe.h says how they are normalized).
  int moe_experts = 0;
  int moe_top_k = 1;
  float moe_capacity_factor = 1.25f;
  int moe_every = 1;
  float moe_aux_loss_coef = 0.01f;
  float moe_z_loss_coef = 0.001f;

  int head_dim() const { return n_embd / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }  // Hkv
  int kv_dim() const { return kv_heads() * head_dim(); }             // Ckv = Hkv·D: width of k and of v
  int qkv_dim() const { return n_embd + 2 * kv_dim(); }              // W3 = C + 2·Ckv: the qkv projection's output
  int ffn() const;
  Activation mlp_activation() const;
  bool gated_mlp() const { return mlp_activation() == Activation::Swiglu; }
  bool is_moe_layer(int layer) const { return moe_experts > 0 && (layer + 1) % moe_every == 0; }
  int moe_layers() const { return moe_experts > 0 ? n_layer / moe_every : 0; }
  // Rows each expert takes from a group of `tokens` tokens: ceil(capacity_factor · tokens · k / E),
  // at least 1 and at most `tokens`.
  int64_t moe_capacity(int64_t tokens) const;
  // Exact count of trainable parameters (formula in model_config.cpp, checked against nn::GPT).
  int64_t parameter_count() const;
  // Parameters one token's forward reads: parameter_count() less the experts it is not routed to
  // ((E - k) experts of every MoE block). Equal to parameter_count() for a dense model.
  int64_t active_parameter_count() const;
  // One expert's MLP (or a dense block's): weights and biases.
  int64_t mlp_parameter_count() const;
  // Throws tessera::Error naming the key and the fix.
  void validate() const;
};

ModelConfig read_model_config(TableReader reader);
// GPT-2 small (124M parameters with tied embeddings): L 12, H 12, C 768, V 50257, T 1024.
ModelConfig gpt2_124m();
std::string architecture_name(Architecture a);
std::string activation_name(Activation a);
// The activation a model of `arch` has when model.activation is not set.
Activation default_activation(Architecture arch);
// The activation called `name` ("relu2"), or nothing.
std::optional<Activation> activation_of_name(std::string_view name);
// Throws tessera::Error naming `key` and the known names.
Activation parse_activation(const std::string& name, const std::string& key);

// Parses a TOML file with a message that names the file, line and column on syntax errors; a path
// that is missing, a folder or not a regular file is refused.
toml::table parse_toml_file(const std::string& path);
// "'configs' is a folder; --config takes a TOML file such as configs/default.toml".
std::string describe_folder_given_as_toml(const std::string& path, const std::string& option);
// The same for text in memory; `name` stands for the file in messages.
toml::table parse_toml_text(std::string_view text, const std::string& name);

}  // namespace tessera::config
