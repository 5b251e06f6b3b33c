#include "config/model_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <variant>

#include "config/model_keys.h"
#include "core/overloaded.h"

namespace tessera::config {

namespace {
// "1, 2, 4, 8": the values that divide n, for messages.
std::string divisors_of(int n) {
  std::string text;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) text += (text.empty() ? "" : ", ") + std::to_string(d);
  }
  return text;
}
}  // namespace

std::string architecture_name(Architecture a) { return a == Architecture::Gpt2 ? "gpt2" : "llama"; }

namespace {
constexpr Activation kActivations[] = {Activation::Gelu, Activation::Relu, Activation::Relu2, Activation::Swiglu};
}  // namespace

std::string activation_name(Activation a) {
  switch (a) {
    case Activation::Gelu: return "gelu";
    case Activation::Relu: return "relu";
    case Activation::Relu2: return "relu2";
    case Activation::Swiglu: return "swiglu";
  }
  TS_FAIL("activation {} has no name", static_cast<int>(a));
}

Activation default_activation(Architecture arch) {
  return arch == Architecture::Llama ? Activation::Swiglu : Activation::Gelu;
}

std::optional<Activation> activation_of_name(std::string_view name) {
  for (Activation a : kActivations) {
    if (activation_name(a) == name) return a;
  }
  return std::nullopt;
}

Activation parse_activation(const std::string& name, const std::string& key) {
  if (const auto a = activation_of_name(name)) return *a;
  std::string known;
  for (Activation a : kActivations) known += fmt::format("{}\"{}\"", known.empty() ? "" : ", ", activation_name(a));
  TS_FAIL("config: {} = '{}' is not known; use one of {}", key, name, known);
}

Activation ModelConfig::mlp_activation() const { return activation.value_or(default_activation(arch)); }

int ModelConfig::ffn() const {
  if (ffn_hidden > 0) return ffn_hidden;
  if (!gated_mlp()) return 4 * n_embd;
  // The SwiGLU MLP keeps its parameter count near a 4C ungated MLP (Llama's rule): 2/3 of 4C,
  // rounded up to 64.
  int f = (8 * n_embd) / 3;
  return (f + 63) / 64 * 64;
}

int64_t ModelConfig::moe_capacity(int64_t tokens) const {
  if (moe_experts <= 0 || tokens <= 0) return tokens;
  const double wanted = std::ceil(static_cast<double>(moe_capacity_factor) * static_cast<double>(tokens) *
                                  moe_top_k / moe_experts);
  return std::clamp<int64_t>(static_cast<int64_t>(wanted), 1, tokens);
}

int64_t ModelConfig::mlp_parameter_count() const {
  const int64_t C = n_embd, F = ffn(), b = bias ? 1 : 0;
  return gated_mlp() ? 2 * C * F + 2 * b * F + F * C + b * C  // gate, up, down
                     : C * F + b * F + F * C + b * C;
}

int64_t ModelConfig::active_parameter_count() const {
  return parameter_count() - int64_t{moe_layers()} * (moe_experts - moe_top_k) * mlp_parameter_count();
}

int64_t ModelConfig::parameter_count() const {
  const int64_t C = n_embd, V = vocab_size, T = seq_len, L = n_layer;
  const int64_t b = bias ? 1 : 0;
  int64_t embed = V * C + (arch == Architecture::Gpt2 ? T * C : 0);  // token (+ learned position) table
  int64_t norm = (arch == Architecture::Gpt2 ? (1 + b) : 1) * C;     // LayerNorm has a bias, RMSNorm none
  const int64_t W3 = qkv_dim();
  int64_t attn = C * W3 + b * W3 + C * C + b * C;                      // qkv and output projection
  const int64_t mlp = mlp_parameter_count();
  const int64_t block = 2 * norm + attn + mlp;
  const int64_t head = tied_embeddings ? 0 : V * C;
  // An MoE block holds E expert MLPs and a router [E, C] (no bias) in place of its MLP.
  const int64_t moe_extra = int64_t{moe_layers()} * ((moe_experts - 1) * mlp + moe_experts * C);
  return embed + L * block + moe_extra + norm + head;
}

void ModelConfig::validate() const {
  // Each key against its declared range (model_keys.cpp), then what one key cannot say alone.
  for (const ModelKey& key : model_keys()) {
    if (!key.range || (key.read_by != nullptr && !key.read_by(*this))) continue;
    std::visit(Overloaded{
                   [&](int ModelConfig::*member) { check_in_range(key.key, this->*member, *key.range); },
                   [&](float ModelConfig::*member) { check_in_range(key.key, this->*member, *key.range); },
                   [](bool ModelConfig::*) {},
                   [](ModelWord) {},
               },
               key.field);
  }
  TS_CHECK(n_embd % n_head == 0, "config: model.n_embd ({}) must be divisible by model.n_head ({}); pick n_head among the divisors of n_embd", n_embd, n_head);
  check_range("model.n_kv_head", n_kv_head, 0, n_head);
  TS_CHECK(n_head % kv_heads() == 0,
           "config: model.n_kv_head = {} must divide model.n_head = {} (each key/value head serves a group of query "
           "heads); pick n_kv_head among {}",
           n_kv_head, n_head, divisors_of(n_head));
  TS_CHECK(arch != Architecture::Llama || head_dim() % 2 == 0,
           "config: rotary positions need an even head size, but model.n_embd / model.n_head = {}", head_dim());
  if (moe_experts > 0) {
    TS_CHECK(moe_top_k <= moe_experts, "config: model.moe_top_k = {} needs at least as many experts, but "
             "model.moe_experts = {}; use moe_top_k = 1 or more experts", moe_top_k, moe_experts);
    TS_CHECK(moe_every >= 1 && moe_every <= n_layer, "config: model.moe_every = {} must be in 1..n_layer ({}): "
             "every moe_every-th block is an MoE block", moe_every, n_layer);
  }
}

ModelConfig read_model_config(TableReader r) {
  ModelConfig m;
  for (const ModelKey& key : model_keys()) {
    const std::string name(key.name());
    std::visit(Overloaded{
                   [&](ModelWord word) {
                     // Read even when absent, so that an unknown key's hint can name it.
                     const std::string given = r.get(name, word.name(m));
                     if (r.has(name)) word.set(m, given);
                   },
                   [&](auto member) { m.*member = r.get(name, m.*member); },
               },
               key.field);
  }
  r.finish();
  m.validate();
  return m;
}

ModelConfig gpt2_124m() {
  ModelConfig m;
  m.arch = Architecture::Gpt2;
  m.n_layer = 12;
  m.n_head = 12;
  m.n_embd = 768;
  m.vocab_size = 50257;
  m.seq_len = 1024;
  return m;
}

namespace {

// A TOML file in `dir` to name in a message: default.toml when there is one, else the first.
std::string toml_file_in(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir / "default.toml", ec)) return (dir / "default.toml").string();
  std::string first;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().string();
    if (entry.path().extension() == ".toml" && (first.empty() || name < first)) first = name;
  }
  return first;
}

}  // namespace

std::string describe_folder_given_as_toml(const std::string& path, const std::string& option) {
  const std::string example = toml_file_in(path);
  return fmt::format("'{}' is a folder; {} takes a TOML file{}", path, option,
                     example.empty() ? std::string(" (such as configs/default.toml)") : " such as " + example);
}

toml::table parse_toml_text(std::string_view text, const std::string& name) {
  try {
    return toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    // The line itself, since the parser's description ("expected ']'") rarely names the key.
    std::istringstream lines{std::string(text)};
    std::string line;
    for (auto n = e.source().begin.line; n > 0 && std::getline(lines, line);) --n;
    TS_FAIL("config file '{}' line {} column {}: {}{}", name, e.source().begin.line, e.source().begin.column,
            e.description(), line.empty() ? std::string() : fmt::format(" (the line: {})", line));
  }
}

toml::table parse_toml_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  TS_CHECK(fs::exists(status), "cannot open config file '{}': it does not exist; check the path", path);
  // Read as a file, a folder gives no bytes: an empty config, and a run on defaults nobody asked for.
  TS_CHECK(!fs::is_directory(status), "{}", describe_folder_given_as_toml(path, "a config"));
  TS_CHECK(fs::is_regular_file(status), "config file '{}' is not a regular file; give a TOML file", path);
  std::ifstream in(path);
  TS_CHECK(in.good(), "cannot read config file '{}': {}", path, std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_toml_text(ss.str(), path);
}

}  // namespace tessera::config
