#include "train/hf_export.h"

#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "data/tokenizer.h"
#include "io/safetensors.h"
#include "nn/gpt.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;

namespace tessera::train {

std::vector<std::pair<std::string, std::string>> export_formats() {
  return {{"hf", "Hugging Face transformers: model.safetensors, config.json and the tokenizer (GPT-2 and Llama)"}};
}

namespace {

using Json = nlohmann::ordered_json;

// Builds the HF tensors from the model's parameters. Tensors made here (transposes, splits, zero
// biases) come from `memory`; the writer keeps every tensor alive until it writes.
class HfWeights {
 public:
  HfWeights(nn::GPT& model, MemoryAccountant& memory) : store_(model.parameters()), memory_(memory) {}

  Tensor param(const std::string& name) { return store_.value(store_.get(name)); }
  bool has(const std::string& name) const {
    for (const auto& p : store_.all()) {
      if (p.name == name) return true;
    }
    return false;
  }
  void add(const std::string& name, const Tensor& t) { writer_.add(name, t); }
  // GPT-2's Conv1D: [out, in] -> [in, out].
  void add_transposed(const std::string& name, const std::string& param_name) {
    add(name, param(param_name).transpose(0, 1).contiguous(memory_, MemoryTag::Workspace));
  }
  // Rows [begin, end) of a [out, ...] parameter (a slice of whole rows is contiguous).
  void add_rows(const std::string& name, const std::string& param_name, int64_t begin, int64_t end) {
    add(name, param(param_name).slice(0, begin, end));
  }
  void add_bias_or_zeros(const std::string& name, const std::string& param_name, int64_t size) {
    if (has(param_name)) {
      add(name, param(param_name));
    } else {
      add(name, Tensor::zeros({size}, DType::F32, MemoryTag::Workspace, memory_));
    }
  }
  void write(const std::string& path) {
    writer_.set_metadata("format", "pt");  // transformers refuses safetensors files without it
    writer_.write(path);
  }

 private:
  nn::ParameterStore& store_;
  MemoryAccountant& memory_;
  io::SafeTensorsWriter writer_;
};

void gpt2_weights(HfWeights& w, const config::ModelConfig& c) {
  const int64_t C = c.n_embd, F = c.ffn();
  w.add("transformer.wte.weight", w.param("embed.tokens.weight"));
  w.add("transformer.wpe.weight", w.param("embed.positions.weight"));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string t = "blocks." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
    w.add(h + "ln_1.weight", w.param(t + "norm1.weight"));
    w.add_bias_or_zeros(h + "ln_1.bias", t + "norm1.bias", C);
    w.add_transposed(h + "attn.c_attn.weight", t + "attn.qkv.weight");
    w.add_bias_or_zeros(h + "attn.c_attn.bias", t + "attn.qkv.bias", c.qkv_dim());
    w.add_transposed(h + "attn.c_proj.weight", t + "attn.proj.weight");
    w.add_bias_or_zeros(h + "attn.c_proj.bias", t + "attn.proj.bias", C);
    w.add(h + "ln_2.weight", w.param(t + "norm2.weight"));
    w.add_bias_or_zeros(h + "ln_2.bias", t + "norm2.bias", C);
    w.add_transposed(h + "mlp.c_fc.weight", t + "mlp.fc.weight");
    w.add_bias_or_zeros(h + "mlp.c_fc.bias", t + "mlp.fc.bias", F);
    w.add_transposed(h + "mlp.c_proj.weight", t + "mlp.proj.weight");
    w.add_bias_or_zeros(h + "mlp.c_proj.bias", t + "mlp.proj.bias", C);
  }
  w.add("transformer.ln_f.weight", w.param("norm.weight"));
  w.add_bias_or_zeros("transformer.ln_f.bias", "norm.bias", C);
  if (!c.tied_embeddings) w.add("lm_head.weight", w.param("head.weight"));
}

void llama_weights(HfWeights& w, const config::ModelConfig& c) {
  const int64_t C = c.n_embd;
  w.add("model.embed_tokens.weight", w.param("embed.tokens.weight"));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string t = "blocks." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    w.add(h + "input_layernorm.weight", w.param(t + "norm1.weight"));
    // The qkv rows: q [C], then k and v [Hkv·D] each (fewer under grouped-query attention).
    const char* parts[] = {"q_proj", "k_proj", "v_proj"};
    const int64_t Ckv = c.kv_dim(), begin[] = {0, C, C + Ckv}, end[] = {C, C + Ckv, C + 2 * Ckv};
    for (int i = 0; i < 3; ++i) {
      w.add_rows(h + "self_attn." + parts[i] + ".weight", t + "attn.qkv.weight", begin[i], end[i]);
      if (c.bias) w.add_rows(h + "self_attn." + parts[i] + ".bias", t + "attn.qkv.bias", begin[i], end[i]);
    }
    w.add(h + "self_attn.o_proj.weight", w.param(t + "attn.proj.weight"));
    w.add(h + "post_attention_layernorm.weight", w.param(t + "norm2.weight"));
    w.add(h + "mlp.gate_proj.weight", w.param(t + "mlp.gate.weight"));
    w.add(h + "mlp.up_proj.weight", w.param(t + "mlp.up.weight"));
    w.add(h + "mlp.down_proj.weight", w.param(t + "mlp.down.weight"));
    if (c.bias) {
      w.add(h + "self_attn.o_proj.bias", w.param(t + "attn.proj.bias"));
      w.add(h + "mlp.gate_proj.bias", w.param(t + "mlp.gate.bias"));
      w.add(h + "mlp.up_proj.bias", w.param(t + "mlp.up.bias"));
      w.add(h + "mlp.down_proj.bias", w.param(t + "mlp.down.bias"));
    }
  }
  w.add("model.norm.weight", w.param("norm.weight"));
  if (!c.tied_embeddings) w.add("lm_head.weight", w.param("head.weight"));
}

// An id the tokenizer has, or null: transformers' GPT-2 defaults (50256) would point outside a
// smaller vocabulary.
Json token_id(int32_t id) { return id >= 0 ? Json(id) : Json(nullptr); }

Json hf_config(const RunConfig& run, const data::Tokenizer* tokenizer) {
  const config::ModelConfig& c = run.model;
  const int32_t bos = tokenizer ? tokenizer->bos_id() : -1, eos = tokenizer ? tokenizer->eos_id() : -1;
  Json j;
  if (c.arch == config::Architecture::Gpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab_size;
    j["n_positions"] = c.seq_len;
    j["n_ctx"] = c.seq_len;
    j["n_embd"] = c.n_embd;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_inner"] = c.ffn();
    j["activation_function"] = "gelu_new";  // GELU's tanh approximation, as tessera trains it
    j["layer_norm_epsilon"] = c.norm_eps;
    j["resid_pdrop"] = c.dropout;  // tessera drops out on the residual branches only
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["scale_attn_weights"] = true;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.n_embd;
    j["intermediate_size"] = c.ffn();
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.kv_heads();
    j["head_dim"] = c.head_dim();
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = c.seq_len;
    j["rms_norm_eps"] = c.norm_eps;
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = nullptr;
    j["attention_bias"] = c.bias;
    j["mlp_bias"] = c.bias;
    j["attention_dropout"] = 0.0;
  }
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["bos_token_id"] = token_id(bos);
  j["eos_token_id"] = token_id(eos);
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  return j;
}

Json tokenizer_config(const RunConfig& run, const data::Tokenizer& tokenizer) {
  auto piece = [&](int32_t id) { return id >= 0 ? Json(tokenizer.piece(id)) : Json(nullptr); };
  Json j;
  j["tokenizer_class"] = "LlamaTokenizer";
  j["model_max_length"] = run.model.seq_len;
  j["bos_token"] = piece(tokenizer.bos_id());
  j["eos_token"] = piece(tokenizer.eos_id());
  j["unk_token"] = piece(tokenizer.unk_id());
  // tessera's data has no BOS and ends documents with EOS; encoding adds neither.
  j["add_bos_token"] = false;
  j["add_eos_token"] = false;
  j["legacy"] = false;
  return j;
}

void check_output_folder(const fs::path& out, bool force) {
  TS_CHECK(!out.empty(), "export needs an output folder");
  if (!fs::exists(out)) return;
  TS_CHECK(fs::is_directory(out), "the output '{}' is a file, not a folder: choose a folder to export into",
           out.string());
  TS_CHECK(force || fs::is_empty(out),
           "the output folder '{}' exists and is not empty: choose a new folder, or pass --force to write the "
           "export's files into it (replacing files of the same names)",
           out.string());
}

}  // namespace

ExportResult export_hf(const std::string& checkpoint, const std::string& out_dir, bool force) {
  const fs::path out(out_dir);
  check_output_folder(out, force);
  ExportResult result;
  result.checkpoint = resolve_checkpoint(checkpoint, "", &result.note);
  const RunConfig run = checkpoint_run_config(read_checkpoint_manifest(result.checkpoint), result.checkpoint);
  const config::ModelConfig& c = run.model;
  TS_CHECK(c.arch != config::Architecture::Gpt2 || c.kv_heads() == c.n_head,
           "export: the checkpoint's GPT-2 model has {} key/value heads for its {} heads (grouped-query attention), "
           "which the Hugging Face GPT-2 model cannot hold; train with model.arch = \"llama\" to export grouped-query "
           "attention",
           c.kv_heads(), c.n_head);
  TS_CHECK(c.moe_experts == 0,
           "export: the checkpoint's model has {} experts per MoE block, which the Hugging Face GPT-2 and Llama models "
           "cannot hold; its weights stay in tessera's checkpoint (tessera sample reads it)", c.moe_experts);
  MemoryAccountant memory;
  nn::GPT model(c, memory, 0);
  const LoadedWeights loaded = load_weights(result.checkpoint, c, {model.parameters(), model.parameters(), nullptr, {}});
  std::optional<data::Tokenizer> tokenizer;
  if (!loaded.tokenizer_path.empty()) tokenizer.emplace(data::Tokenizer::load(loaded.tokenizer_path));

  HfWeights weights(model, memory);
  if (c.arch == config::Architecture::Gpt2) {
    gpt2_weights(weights, c);
  } else {
    llama_weights(weights, c);
  }
  result.model_type = config::architecture_name(c.arch);
  fs::create_directories(out);
  weights.write((out / "model.safetensors").string());
  write_file_atomically((out / "config.json").string(), hf_config(run, tokenizer ? &*tokenizer : nullptr).dump(2) + "\n");
  result.files = {"model.safetensors", "config.json"};
  if (tokenizer) {
    tokenizer->save(out / "tokenizer.model");
    write_file_atomically((out / "tokenizer_config.json").string(), tokenizer_config(run, *tokenizer).dump(2) + "\n");
    result.files.push_back("tokenizer.model");
    result.files.push_back("tokenizer_config.json");
  }
  return result;
}

}  // namespace tessera::train
