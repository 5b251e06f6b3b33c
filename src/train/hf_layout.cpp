#include "train/hf_layout.h"

#include <fmt/format.h>

#include <climits>
#include <optional>

#include "core/check.h"

namespace tessera::train {

using config::Architecture;
using config::ModelConfig;

namespace {

std::vector<HfTensor> gpt2_tensors(const ModelConfig& c) {
  const int64_t C = c.n_embd, F = c.ffn(), W3 = c.qkv_dim();
  std::vector<HfTensor> t;
  const auto same = [&](std::string name, std::string param, Shape shape) {
    t.push_back({std::move(name), std::move(param), HfMapping::Same, std::move(shape)});
  };
  const auto conv1d = [&](std::string name, std::string param, int64_t in, int64_t out) {
    t.push_back({std::move(name), std::move(param), HfMapping::Transposed, {in, out}});
  };
  const auto bias = [&](std::string name, std::string param, int64_t size) {
    t.push_back({std::move(name), std::move(param), c.bias ? HfMapping::Same : HfMapping::Zeros, {size}});
  };
  same("transformer.wte.weight", "embed.tokens.weight", {c.vocab_size, C});
  same("transformer.wpe.weight", "embed.positions.weight", {c.seq_len, C});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
    same(h + "ln_1.weight", p + "norm1.weight", {C});
    bias(h + "ln_1.bias", p + "norm1.bias", C);
    conv1d(h + "attn.c_attn.weight", p + "attn.qkv.weight", C, W3);
    bias(h + "attn.c_attn.bias", p + "attn.qkv.bias", W3);
    conv1d(h + "attn.c_proj.weight", p + "attn.proj.weight", C, C);
    bias(h + "attn.c_proj.bias", p + "attn.proj.bias", C);
    same(h + "ln_2.weight", p + "norm2.weight", {C});
    bias(h + "ln_2.bias", p + "norm2.bias", C);
    conv1d(h + "mlp.c_fc.weight", p + "mlp.fc.weight", C, F);
    bias(h + "mlp.c_fc.bias", p + "mlp.fc.bias", F);
    conv1d(h + "mlp.c_proj.weight", p + "mlp.proj.weight", F, C);
    bias(h + "mlp.c_proj.bias", p + "mlp.proj.bias", C);
  }
  same("transformer.ln_f.weight", "norm.weight", {C});
  bias("transformer.ln_f.bias", "norm.bias", C);
  if (!c.tied_embeddings) same("lm_head.weight", "head.weight", {c.vocab_size, C});
  return t;
}

// Mixtral's MoE layer `h` ("model.layers.N.block_sparse_moe.") from tessera's `p`
// ("blocks.N.moe."): the router, then each expert's w1 (gate), w3 (up) and w2 (down), cut from
// tessera's stacks (nn/moe.h) without biases (hf_refusal keeps models with biases away).
void mixtral_moe(std::vector<HfTensor>& t, const ModelConfig& c, const std::string& h, const std::string& p) {
  const int64_t C = c.n_embd, F = c.ffn(), E = c.moe_experts;
  t.push_back({h + "gate.weight", p + "router.weight", HfMapping::Same, {E, C}});
  for (int64_t e = 0; e < E; ++e) {
    const std::string expert = h + "experts." + std::to_string(e) + ".";
    const auto block = [&](const char* w, const char* stack, Shape shape) {
      HfTensor x{expert + w + ".weight", p + "experts." + stack + ".weight", HfMapping::Expert, std::move(shape)};
      x.expert = e;
      t.push_back(std::move(x));
    };
    block("w1", "gate", {F, C});
    block("w3", "up", {F, C});
    block("w2", "down", {C, F});
  }
}

std::vector<HfTensor> llama_tensors(const ModelConfig& c) {
  const int64_t C = c.n_embd, F = c.ffn(), Ckv = c.kv_dim();
  std::vector<HfTensor> t;
  const auto same = [&](std::string name, std::string param, Shape shape) {
    t.push_back({std::move(name), std::move(param), HfMapping::Same, std::move(shape)});
  };
  same("model.embed_tokens.weight", "embed.tokens.weight", {c.vocab_size, C});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    same(h + "input_layernorm.weight", p + "norm1.weight", {C});
    // The qkv rows: q [C], then k and v [Ckv] each (fewer under grouped-query attention).
    const char* parts[] = {"q_proj", "k_proj", "v_proj"};
    const int64_t begin[] = {0, C, C + Ckv}, end[] = {C, C + Ckv, C + 2 * Ckv};
    for (int i = 0; i < 3; ++i) {
      const std::string name = h + "self_attn." + parts[i];
      const int64_t rows = end[i] - begin[i];
      t.push_back({name + ".weight", p + "attn.qkv.weight", HfMapping::Rows, {rows, C}, begin[i], end[i]});
      if (c.bias) t.push_back({name + ".bias", p + "attn.qkv.bias", HfMapping::Rows, {rows}, begin[i], end[i]});
    }
    same(h + "self_attn.o_proj.weight", p + "attn.proj.weight", {C, C});
    if (c.bias) same(h + "self_attn.o_proj.bias", p + "attn.proj.bias", {C});
    same(h + "post_attention_layernorm.weight", p + "norm2.weight", {C});
    if (c.is_moe_layer(l)) {
      mixtral_moe(t, c, h + "block_sparse_moe.", p + "moe.");
      continue;
    }
    same(h + "mlp.gate_proj.weight", p + "mlp.gate.weight", {F, C});
    same(h + "mlp.up_proj.weight", p + "mlp.up.weight", {F, C});
    same(h + "mlp.down_proj.weight", p + "mlp.down.weight", {C, F});
    if (c.bias) {
      same(h + "mlp.gate_proj.bias", p + "mlp.gate.bias", {F});
      same(h + "mlp.up_proj.bias", p + "mlp.up.bias", {F});
      same(h + "mlp.down_proj.bias", p + "mlp.down.bias", {C});
    }
  }
  same("model.norm.weight", "norm.weight", {C});
  if (!c.tied_embeddings) same("lm_head.weight", "head.weight", {c.vocab_size, C});
  return t;
}

// tessera's model keys and the config.json key of each class that holds it ("" where it has none).
struct ConfigKey {
  std::string_view tessera, gpt2, llama, mixtral;
};
constexpr ConfigKey kConfigKeys[] = {
    {"arch", "model_type", "model_type", "model_type"},
    {"vocab_size", "vocab_size", "vocab_size", "vocab_size"},
    {"n_layer", "n_layer", "num_hidden_layers", "num_hidden_layers"},
    {"n_head", "n_head", "num_attention_heads", "num_attention_heads"},
    {"n_kv_head", "", "num_key_value_heads", "num_key_value_heads"},
    {"n_embd", "n_embd", "hidden_size", "hidden_size"},
    {"ffn_hidden", "n_inner", "intermediate_size", "intermediate_size"},
    {"seq_len", "n_positions", "max_position_embeddings", "max_position_embeddings"},
    {"norm_eps", "layer_norm_epsilon", "rms_norm_eps", "rms_norm_eps"},
    {"rope_theta", "", "rope_theta", "rope_theta"},
    {"bias", "", "attention_bias", "attention_bias"},
    {"tied_embeddings", "tie_word_embeddings", "tie_word_embeddings", "tie_word_embeddings"},
    {"activation", "activation_function", "hidden_act", "hidden_act"},
    {"moe_experts", "", "", "num_local_experts"},
    {"moe_top_k", "", "", "num_experts_per_tok"},
};

constexpr HfModel kHfModels[] = {HfModel::Gpt2, HfModel::Llama, HfModel::Mixtral};

const std::string kSupported =
    "\"gpt2\" (GPT2LMHeadModel), \"llama\" (LlamaForCausalLM) and \"mixtral\" (MixtralForCausalLM)";

// Reads config.json's values by their keys; a null value counts as absent (GPT-2's n_inner is null
// for the default width).
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& json, const std::string& file) : json_(json), file_(file) {}

  const nlohmann::json* find(std::string_view key) const {
    const auto it = json_.find(key);
    return it == json_.end() || it->is_null() ? nullptr : &*it;
  }
  int integer(std::string_view key, std::optional<int> fallback = std::nullopt) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) {
      TS_CHECK(fallback.has_value(), "'{}' has no \"{}\", which tessera needs to build the model; add it", file_, key);
      return *fallback;
    }
    TS_CHECK(v->is_number_integer() && v->get<int64_t>() >= INT_MIN && v->get<int64_t>() <= INT_MAX,
             "'{}': \"{}\" = {} is not an integer of 32 bits; give a whole number", file_, key, v->dump());
    return static_cast<int>(v->get<int64_t>());
  }
  float number(std::string_view key, float fallback) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return fallback;
    TS_CHECK(v->is_number(), "'{}': \"{}\" = {} is not a number", file_, key, v->dump());
    return static_cast<float>(v->get<double>());
  }
  bool boolean(std::string_view key, bool fallback) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return fallback;
    TS_CHECK(v->is_boolean(), "'{}': \"{}\" = {} is not true or false", file_, key, v->dump());
    return v->get<bool>();
  }
  std::string text(std::string_view key, const std::string& fallback) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return fallback;
    TS_CHECK(v->is_string(), "'{}': \"{}\" = {} is not a string", file_, key, v->dump());
    return v->get<std::string>();
  }

 private:
  const nlohmann::json& json_;
  const std::string& file_;
};

std::optional<HfModel> model_of_type(const std::string& type) {
  for (HfModel m : kHfModels) {
    if (type == hf_model_type(m)) return m;
  }
  return std::nullopt;
}

std::optional<HfModel> model_of_class(const std::string& name) {
  for (HfModel m : kHfModels) {
    if (name == hf_class_name(m)) return m;
  }
  return std::nullopt;
}

// From model_type, or without it from architectures; where both are given they must agree.
HfModel model_class_of(const ConfigReader& r, const std::string& file) {
  std::optional<HfModel> model;
  const std::string type = r.text("model_type", "");
  if (!type.empty()) {
    model = model_of_type(type);
    TS_CHECK(model.has_value(), "'{}': model_type \"{}\" is not a model tessera reads; it reads {}", file, type,
             kSupported);
  }
  if (const nlohmann::json* classes = r.find("architectures")) {
    TS_CHECK(classes->is_array() && !classes->empty() && classes->front().is_string(),
             "'{}': \"architectures\" = {} is not a list of class names such as [\"LlamaForCausalLM\"]", file,
             classes->dump());
    const std::string name = classes->front().get<std::string>();
    const std::optional<HfModel> by_class = model_of_class(name);
    TS_CHECK(by_class.has_value(), "'{}': architectures names {}, a model class tessera does not read; it reads {}",
             file, name, kSupported);
    TS_CHECK(!model || *model == *by_class, "'{}': model_type \"{}\" and architectures [\"{}\"] name different "
             "models; correct one of them", file, type, name);
    model = by_class;
  }
  TS_CHECK(model.has_value(), "'{}' names no model_type or architectures, so the model is unknown; tessera reads {}",
           file, kSupported);
  return *model;
}

// transformers' names of the ungated activations tessera has; GELU is its tanh approximation,
// which transformers calls either of two names.
std::optional<config::Activation> activation_of_hf(const std::string& name) {
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return config::Activation::Gelu;
  if (name == "relu") return config::Activation::Relu;
  if (name == "relu2") return config::Activation::Relu2;
  return std::nullopt;
}

void read_gpt2(const ConfigReader& r, const std::string& file, ModelConfig& c) {
  const std::string act = r.text("activation_function", "gelu_new");
  const std::optional<config::Activation> activation = activation_of_hf(act);
  TS_CHECK(activation.has_value(),
           "'{}': activation_function \"{}\" is not one of tessera's; tessera's GPT-2 reads the tanh approximation of "
           "GELU (\"gelu_new\" or \"gelu_pytorch_tanh\"), \"relu\" and \"relu2\"", file, act);
  // GELU is GPT-2's own: left unset, as a run config that does not name it.
  if (*activation != config::Activation::Gelu) c.activation = activation;
  TS_CHECK(r.boolean("scale_attn_weights", true) && !r.boolean("scale_attn_by_inverse_layer_idx", false),
           "'{}': tessera's attention scales its scores by 1/sqrt(head size) only, which needs "
           "scale_attn_weights = true and scale_attn_by_inverse_layer_idx = false", file);
  c.ffn_hidden = r.integer("n_inner", 0);  // 0: tessera's default for GPT-2, 4C, as transformers' null
  c.bias = true;                           // GPT-2's layers always have biases
}

// The values transformers' config classes give the keys a config.json may leave out.
struct HfDefaults {
  int seq_len;
  float norm_eps;
  bool tied_embeddings;
  float rope_theta;
};
HfDefaults transformers_defaults(HfModel model) {
  switch (model) {
    case HfModel::Gpt2: return {1024, 1e-5f, true, 0.0f};
    case HfModel::Llama: return {2048, 1e-6f, false, 10000.0f};
    case HfModel::Mixtral: return {4096 * 32, 1e-5f, false, 1e6f};
  }
  TS_FAIL("unknown Hugging Face model");
}

void read_llama(const ConfigReader& r, const std::string& file, HfModel model, ModelConfig& c) {
  const auto key = [&](std::string_view k) { return hf_config_key(model, k); };
  const std::string act = r.text("hidden_act", "silu");
  TS_CHECK(act == "silu", "'{}': hidden_act \"{}\" is not tessera's; tessera's Llama uses SwiGLU (\"silu\")", file,
           act);
  TS_CHECK(r.find("rope_scaling") == nullptr,
           "'{}': rope_scaling = {} is set, and tessera's rotary positions have no scaling; only models without it "
           "load", file, r.find("rope_scaling")->dump());
  c.ffn_hidden = r.integer(key("ffn_hidden"));
  c.n_kv_head = r.integer(key("n_kv_head"), c.n_head);
  c.rope_theta = r.number(key("rope_theta"), transformers_defaults(model).rope_theta);
  const bool attention_bias = r.boolean(key("bias"), false), mlp_bias = r.boolean("mlp_bias", false);
  TS_CHECK(attention_bias == mlp_bias,
           "'{}': attention_bias = {} but mlp_bias = {}; tessera's model.bias puts biases in both or in neither",
           file, attention_bias, mlp_bias);
  c.bias = attention_bias;
  if (c.n_head > 0) {
    const int head_dim = r.integer("head_dim", c.n_embd / c.n_head);
    TS_CHECK(head_dim * c.n_head == c.n_embd,
             "'{}': head_dim = {} with {} heads is not hidden_size = {}; tessera's heads split the width evenly "
             "(head size = hidden_size / num_attention_heads)", file, head_dim, c.n_head, c.n_embd);
  }
}

// Mixtral's experts, in every layer. Its router drops no token: tessera's does not either with a
// capacity factor of E / k (every expert can take every token of a microbatch).
void read_mixtral(const ConfigReader& r, const std::string& file, ModelConfig& c) {
  const auto key = [](std::string_view k) { return hf_config_key(HfModel::Mixtral, k); };
  c.moe_experts = r.integer(key("moe_experts"));
  TS_CHECK(c.moe_experts >= 1, "'{}': num_local_experts = {}; a Mixtral model has at least one expert per layer",
           file, c.moe_experts);
  c.moe_top_k = r.integer(key("moe_top_k"), 2);
  c.moe_every = 1;
  if (c.moe_top_k > 0) c.moe_capacity_factor = static_cast<float>(c.moe_experts) / static_cast<float>(c.moe_top_k);
  if (const nlohmann::json* window = r.find("sliding_window")) {
    TS_CHECK(window->is_number_integer() && window->get<int64_t>() >= c.seq_len,
             "'{}': sliding_window = {} is shorter than the context (max_position_embeddings = {}), and tessera's "
             "attention sees the whole context; only models without a window (null) or with one at least as long "
             "as the context load", file, window->dump(), c.seq_len);
  }
}

// GPT-2's activation_function for an ungated activation (hf_refusal keeps SwiGLU away).
std::string gpt2_activation_function(config::Activation a) {
  switch (a) {
    case config::Activation::Gelu: return "gelu_new";  // GELU's tanh approximation, as tessera trains it
    case config::Activation::Relu: return "relu";
    case config::Activation::Relu2: return "relu2";
    case config::Activation::Swiglu: break;
  }
  TS_FAIL("the Hugging Face GPT-2 model has no gated MLP");
}

}  // namespace

HfModel hf_model_of(const ModelConfig& model) {
  if (model.arch == Architecture::Gpt2) return HfModel::Gpt2;
  return model.moe_experts > 0 ? HfModel::Mixtral : HfModel::Llama;
}

std::optional<std::string> hf_refusal(const ModelConfig& model) {
  const config::Activation a = model.mlp_activation();
  if (model.arch == Architecture::Gpt2 && a == config::Activation::Swiglu) {
    return std::string("the Hugging Face GPT-2 model has no gated MLP, so model.activation = \"swiglu\" cannot be "
                       "written for model.arch = \"gpt2\"; train with model.arch = \"llama\" to export SwiGLU");
  }
  if (model.arch == Architecture::Llama && a != config::Activation::Swiglu) {
    return fmt::format("the Hugging Face Llama model's MLP is always gated, so model.activation = \"{}\" cannot be "
                       "written for model.arch = \"llama\"; train with model.arch = \"gpt2\" to export it",
                       config::activation_name(a));
  }
  if (model.arch == Architecture::Gpt2 && model.kv_heads() != model.n_head) {
    return fmt::format("the GPT-2 model has {} key/value heads for its {} heads (grouped-query attention), which the "
                       "Hugging Face GPT-2 model cannot hold; train with model.arch = \"llama\" to export grouped-query "
                       "attention", model.kv_heads(), model.n_head);
  }
  if (model.arch == Architecture::Gpt2 && model.moe_experts > 0) {
    return fmt::format("a GPT-2 model with experts (model.moe_experts = {}) has no Hugging Face layout: "
                       "transformers' GPT-2 has no mixture of experts, and its MoE model of this shape, Mixtral, is a "
                       "Llama; train with model.arch = \"llama\" to export experts in Mixtral's layout, or keep the "
                       "weights in tessera's checkpoint (tessera sample reads it)", model.moe_experts);
  }
  if (hf_model_of(model) == HfModel::Mixtral && model.bias) {
    return std::string("MixtralForCausalLM has no biases (its attention, router and experts are linears without "
                       "them), so a Llama model with experts and model.bias = true cannot be written; train with "
                       "model.bias = false to export it");
  }
  if (hf_model_of(model) == HfModel::Mixtral && model.moe_every != 1) {
    return fmt::format("every layer of MixtralForCausalLM is an MoE layer, so model.moe_every = {} (dense MLPs in the "
                       "other blocks) cannot be written; train with model.moe_every = 1 to export it",
                       model.moe_every);
  }
  return std::nullopt;
}

std::vector<HfTensor> hf_tensors(const ModelConfig& model) {
  if (const auto refusal = hf_refusal(model)) TS_FAIL("{}", *refusal);
  return model.arch == Architecture::Gpt2 ? gpt2_tensors(model) : llama_tensors(model);
}

std::string mixtral_forward_differences(const ModelConfig& c) {
  if (c.moe_experts == 0) return {};
  const int E = c.moe_experts, k = c.moe_top_k;
  const std::string gates =
      k == 1 ? fmt::format("MixtralForCausalLM renormalizes the gates of a token's chosen experts to sum to 1, so with "
                           "num_experts_per_tok = 1 it weights the chosen expert's output by 1, where tessera weights "
                           "it by that expert's router probability over all {} experts", E)
             : fmt::format("MixtralForCausalLM renormalizes the gates of a token's {} chosen experts to sum to 1 (a "
                           "softmax over their {} logits), where tessera weights each chosen expert's output by its "
                           "router probability over all {} experts (together less than 1)", k, k, E);
  // An expert takes at most min(ceil(factor · N · k / E), N) of a microbatch's N tokens: all of
  // them, whatever the routing, when factor · k >= E.
  const bool drops = static_cast<double>(c.moe_capacity_factor) * k < E;
  const std::string capacity =
      drops ? fmt::format("MixtralForCausalLM has no capacity and runs every choice, where this model's experts take "
                          "at most ceil(moe_capacity_factor · N · k / E) of a microbatch's N tokens "
                          "(moe_capacity_factor = {}) and drop the rest to the residual; a model trained with "
                          "moe_capacity_factor >= E / k = {} drops none",
                          c.moe_capacity_factor, static_cast<double>(E) / k)
            : fmt::format("neither drops a token (this model's moe_capacity_factor = {} is at least E / k = {})",
                          c.moe_capacity_factor, static_cast<double>(E) / k);
  return fmt::format("{}; {}. tessera has no setting that renormalizes the gates, so the two forwards differ where a "
                     "token's chosen gates do not sum to 1. The router's load-balancing and z-losses are training "
                     "terms and change no output", gates, capacity);
}

std::string_view hf_model_type(HfModel model) {
  switch (model) {
    case HfModel::Gpt2: return "gpt2";
    case HfModel::Llama: return "llama";
    case HfModel::Mixtral: return "mixtral";
  }
  return {};
}

std::string_view hf_class_name(HfModel model) {
  switch (model) {
    case HfModel::Gpt2: return "GPT2LMHeadModel";
    case HfModel::Llama: return "LlamaForCausalLM";
    case HfModel::Mixtral: return "MixtralForCausalLM";
  }
  return {};
}

std::string_view hf_config_key(HfModel model, std::string_view key) {
  for (const ConfigKey& k : kConfigKeys) {
    if (k.tessera != key) continue;
    switch (model) {
      case HfModel::Gpt2: return k.gpt2;
      case HfModel::Llama: return k.llama;
      case HfModel::Mixtral: return k.mixtral;
    }
  }
  return {};
}

nlohmann::ordered_json hf_config_json(const ModelConfig& c, int32_t bos_id, int32_t eos_id) {
  using Json = nlohmann::ordered_json;
  const HfModel model = hf_model_of(c);
  const auto key = [&](std::string_view k) { return std::string(hf_config_key(model, k)); };
  Json j;
  j["architectures"] = {hf_class_name(model)};
  j["model_type"] = hf_model_type(model);
  j[key("vocab_size")] = c.vocab_size;
  j[key("seq_len")] = c.seq_len;
  j[key("n_embd")] = c.n_embd;
  j[key("ffn_hidden")] = c.ffn();
  j[key("n_layer")] = c.n_layer;
  j[key("n_head")] = c.n_head;
  j[key("norm_eps")] = c.norm_eps;
  if (model == HfModel::Gpt2) {
    j["n_ctx"] = c.seq_len;
    j["activation_function"] = gpt2_activation_function(c.mlp_activation());
    j["resid_pdrop"] = c.dropout;           // tessera drops out on the residual branches only
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["scale_attn_weights"] = true;
  } else {
    j[key("n_kv_head")] = c.kv_heads();
    j["head_dim"] = c.head_dim();
    j["hidden_act"] = "silu";
    j[key("rope_theta")] = c.rope_theta;
    j["rope_scaling"] = nullptr;
    j[key("bias")] = c.bias;
    j["mlp_bias"] = c.bias;
    j["attention_dropout"] = 0.0;
  }
  if (model == HfModel::Mixtral) {
    j[key("moe_experts")] = c.moe_experts;
    j[key("moe_top_k")] = c.moe_top_k;
    // tessera's attention sees the whole context and its router has no jitter. The router's
    // training losses are not written: transformers' load-balancing loss is not tessera's.
    j["sliding_window"] = nullptr;
    j["router_jitter_noise"] = 0.0;
    j["output_router_logits"] = false;
  }
  j[key("tied_embeddings")] = c.tied_embeddings;
  // transformers' GPT-2 defaults (50256) would point outside a smaller vocabulary.
  j["bos_token_id"] = bos_id >= 0 ? Json(bos_id) : Json(nullptr);
  j["eos_token_id"] = eos_id >= 0 ? Json(eos_id) : Json(nullptr);
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  return j;
}

ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& file) {
  TS_CHECK(config.is_object(), "'{}' is not a JSON object of model settings", file);
  const ConfigReader r(config, file);
  const HfModel model = model_class_of(r, file);
  const HfDefaults defaults = transformers_defaults(model);
  const auto key = [&](std::string_view k) { return hf_config_key(model, k); };
  ModelConfig c;
  c.arch = model == HfModel::Gpt2 ? Architecture::Gpt2 : Architecture::Llama;
  c.vocab_size = r.integer(key("vocab_size"));
  c.n_layer = r.integer(key("n_layer"));
  c.n_head = r.integer(key("n_head"));
  c.n_embd = r.integer(key("n_embd"));
  c.seq_len = r.integer(key("seq_len"), defaults.seq_len);
  c.norm_eps = r.number(key("norm_eps"), defaults.norm_eps);
  c.tied_embeddings = r.boolean(key("tied_embeddings"), defaults.tied_embeddings);
  c.dropout = 0.0f;
  if (model == HfModel::Gpt2) {
    read_gpt2(r, file, c);
  } else {
    read_llama(r, file, model, c);
  }
  if (model == HfModel::Mixtral) read_mixtral(r, file, c);
  try {
    c.validate();
  } catch (const Error& e) {
    TS_FAIL("'{}' describes a model tessera cannot build: {}", file, e.what());
  }
  return c;
}

}  // namespace tessera::train
