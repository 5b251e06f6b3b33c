// Import of the Hugging Face layout (train/hf_import.h), through the real program: a folder that
// `tessera export --format hf` wrote starts a run (train.init_from) whose losses equal, bit for bit,
// those of a run started from the checkpoint it was exported from, for GPT-2, Llama and Mixtral;
// the same folder rewritten by the test as two shards with an index, or with bf16 or f16 tensors,
// or with the names of a base model, loads as it should; `tessera sample` reads it; and each kind of
// broken folder is refused with a message that names the problem.
#include <gtest/gtest.h>

#include <utility>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "core/dtype.h"
#include "io/safetensors.h"
#include "train/hf_layout.h"

namespace fs = std::filesystem;
using namespace tessera;
using namespace tessera::testing;

namespace {

fs::path g_root, g_dataset;

const std::string kModel =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 "
    "--train.batch_size 4 --train.micro_batch_size 4 --train.eval_every 0 --train.eval_batches 1 "
    "--train.sample_tokens 0 --optim.warmup_steps 1 --optim.lr 0.01 --log.progress plain";

struct StoredTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<char> bytes;
};

std::vector<StoredTensor> read_tensors(const fs::path& file) {
  const io::SafeTensorsFile f = io::SafeTensorsFile::open(file.string());
  std::vector<StoredTensor> out;
  for (const std::string& name : f.names()) {
    const io::SafeTensorEntry& e = f.entry(name);
    const char* data = static_cast<const char*>(e.data);
    out.push_back({name, e.dtype, e.shape, std::vector<char>(data, data + e.bytes)});
  }
  return out;
}

void write_tensors(const std::vector<StoredTensor>& tensors, const fs::path& file) {
  io::SafeTensorsWriter writer;
  for (const StoredTensor& t : tensors) writer.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  writer.set_metadata("format", "pt");
  writer.write(file.string());
}

StoredTensor* find(std::vector<StoredTensor>& tensors, const std::string& name) {
  for (StoredTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

std::vector<float> floats_of(const StoredTensor& t) {
  std::vector<float> v(t.bytes.size() / sizeof(float));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

void set_floats(StoredTensor& t, const std::vector<float>& v) {
  t.dtype = DType::F32;
  t.bytes.assign(reinterpret_cast<const char*>(v.data()), reinterpret_cast<const char*>(v.data() + v.size()));
}

// An f32 tensor stored as `dtype` (bf16 or f16); or, with `as_f32`, still f32 but holding the
// values that dtype rounds it to.
StoredTensor rounded(const StoredTensor& t, DType dtype, bool as_f32) {
  const std::vector<float> v = floats_of(t);
  std::vector<uint16_t> half(v.size());
  std::vector<float> back(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    half[i] = dtype == DType::BF16 ? to_bf16(v[i]).bits : to_f16(v[i]).bits;
    back[i] = dtype == DType::BF16 ? to_float(bf16{half[i]}) : to_float(f16{half[i]});
  }
  StoredTensor out = t;
  if (as_f32) {
    set_floats(out, back);
  } else {
    out.dtype = dtype;
    out.bytes.assign(reinterpret_cast<const char*>(half.data()), reinterpret_cast<const char*>(half.data() + half.size()));
  }
  return out;
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_file(path.string())); }

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

class HfImport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = fs::temp_directory_path() / ("tessera_hf_import_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }

  // A run of three steps at a high learning rate (every weight moves off its initial value),
  // exported into `name`_hf; returns the run.
  static fs::path train_and_export(const std::string& name, const std::string& extra) {
    const fs::path run = g_root / name;
    CliResult r = run_tessera("train --data.dir " + g_dataset.string() + " --train.out_dir " + run.string() + " " +
                              kModel + " --train.steps 3 " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    r = run_tessera("export --format hf " + run.string() + " " + hf(name).string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return run;
  }
  static fs::path hf(const std::string& name) { return g_root / (name + "_hf"); }

  // A new run of three steps started from `init`; the output of `tessera train`.
  static CliResult train_from(const fs::path& init, const std::string& name, const std::string& extra) {
    return run_tessera("train --data.dir " + g_dataset.string() + " --train.out_dir " + (g_root / name).string() +
                       " " + kModel + " --train.steps 3 --train.seed 11 --train.init_from " + init.string() + " " +
                       extra);
  }
  // Its train losses, each step's.
  static std::vector<double> losses_from(const fs::path& init, const std::string& name, const std::string& extra) {
    const CliResult r = train_from(init, name, extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("initialized from the weights of " + init.string()), std::string::npos) << r.output;
    const std::vector<double> losses = train_losses_of((g_root / name / "metrics.jsonl").string());
    EXPECT_EQ(losses.size(), 3u);
    return losses;
  }

  // A copy of the folder `from` with `tensors` for its weights (model.safetensors).
  static fs::path with_weights(const fs::path& from, const std::string& name, const std::vector<StoredTensor>& tensors) {
    const fs::path to = g_root / name;
    fs::create_directories(to);
    for (const char* file : {"config.json", "tokenizer.model", "tokenizer_config.json"}) {
      fs::copy_file(from / file, to / file, fs::copy_options::overwrite_existing);
    }
    if (!tensors.empty()) write_tensors(tensors, to / "model.safetensors");
    return to;
  }
};

TEST_F(HfImport, Gpt2ExportStartsARunAsItsCheckpointDoes) {
  const fs::path run = train_and_export("gpt2", "");
  const std::vector<double> from_hf = losses_from(hf("gpt2"), "gpt2_from_hf", "");
  const std::vector<double> from_run = losses_from(run, "gpt2_from_run", "");
  EXPECT_EQ(from_hf, from_run);
  const std::vector<double> fresh = train_losses_of((run / "metrics.jsonl").string());
  EXPECT_NE(from_hf.front(), fresh.front()) << "a run from trained weights starts lower than a fresh one";
}

// Untied head, grouped-query attention (q, k and v of other heights fused back into qkv), a rotary
// base other than the default.
TEST_F(HfImport, LlamaExportStartsARunAsItsCheckpointDoes) {
  const std::string llama =
      "--model.arch llama --model.tied_embeddings false --model.n_head 4 --model.n_kv_head 2 --model.rope_theta 500";
  const fs::path run = train_and_export("llama", llama);
  EXPECT_EQ(losses_from(hf("llama"), "llama_from_hf", llama), losses_from(run, "llama_from_run", llama));
}

// A Llama with experts, exported as Mixtral (top-2, a capacity that drops no token), starts a run as
// its checkpoint does; the note says how MixtralForCausalLM's forward differs. A run whose model
// routes otherwise is refused naming the key.
TEST_F(HfImport, MixtralExportStartsARunAsItsCheckpointDoes) {
  const std::string moe = "--model.arch llama --model.moe_experts 4 --model.moe_top_k 2 --model.moe_capacity_factor 2";
  const fs::path run = train_and_export("mixtral", moe);
  EXPECT_EQ(losses_from(hf("mixtral"), "mixtral_from_hf", moe), losses_from(run, "mixtral_from_run", moe));
  const CliResult noted = train_from(hf("mixtral"), "mixtral_noted", moe + " --train.steps 1");
  EXPECT_NE(noted.output.find("holds a Mixtral model, and tessera's forward of it is not MixtralForCausalLM's"),
            std::string::npos) << noted.output;
  const CliResult top1 = train_from(hf("mixtral"), "mixtral_top1", moe + " --model.moe_top_k 1");
  EXPECT_NE(top1.exit_code, 0);
  EXPECT_NE(top1.output.find("model.moe_top_k: config.json num_experts_per_tok = 2 vs config 1"), std::string::npos)
      << top1.output;
}

// Squared ReLU: exported with activation_function "relu2", read back as model.activation = "relu2";
// a run that does not set it (GELU) is refused naming the key.
TEST_F(HfImport, Gpt2WithSquaredReluRoundTripsItsActivation) {
  const std::string relu2 = "--model.activation relu2";
  const fs::path run = train_and_export("gpt2_relu2", relu2);
  EXPECT_EQ(nlohmann::json::parse(read_file((hf("gpt2_relu2") / "config.json").string()))["activation_function"],
            "relu2");
  EXPECT_EQ(losses_from(hf("gpt2_relu2"), "relu2_from_hf", relu2), losses_from(run, "relu2_from_run", relu2));
  const CliResult gelu = train_from(hf("gpt2_relu2"), "relu2_as_gelu", "");
  EXPECT_NE(gelu.exit_code, 0);
  EXPECT_NE(gelu.output.find("model.activation: config.json activation_function = relu2 vs config gelu"),
            std::string::npos)
      << gelu.output;
}

// GPT-2 without biases exports zero biases (HF's GPT-2 always has them); they load back into a
// model without biases, and biases that are not zero are refused there.
TEST_F(HfImport, Gpt2WithoutBiasesTakesZeroBiasesOnly) {
  const std::string no_bias = "--model.bias false --model.tied_embeddings false";
  const fs::path run = train_and_export("gpt2_nobias", no_bias);
  EXPECT_EQ(losses_from(hf("gpt2_nobias"), "nobias_from_hf", no_bias), losses_from(run, "nobias_from_run", no_bias));

  std::vector<StoredTensor> tensors = read_tensors(hf("gpt2_nobias") / "model.safetensors");
  StoredTensor* bias = find(tensors, "transformer.h.1.mlp.c_fc.bias");
  ASSERT_NE(bias, nullptr);
  std::vector<float> values = floats_of(*bias);
  values[5] = 0.25f;
  set_floats(*bias, values);
  const fs::path biased = with_weights(hf("gpt2_nobias"), "nobias_biased", tensors);
  const CliResult r = train_from(biased, "nobias_refused", no_bias);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("tensor 'transformer.h.1.mlp.c_fc.bias'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("set model.bias = true"), std::string::npos) << r.output;
}

// model.safetensors split in two shards with model.safetensors.index.json loads as the one file;
// an index that names a shard the folder lacks is refused naming it.
TEST_F(HfImport, ShardedWeightsLoadAsOneFile) {
  train_and_export("shard", "--model.arch llama");
  const std::vector<StoredTensor> tensors = read_tensors(hf("shard") / "model.safetensors");
  const fs::path sharded = with_weights(hf("shard"), "shard_sharded", {});
  const size_t half = tensors.size() / 2;
  const std::string names[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (int s = 0; s < 2; ++s) {
    const std::vector<StoredTensor> part(tensors.begin() + (s == 0 ? 0 : half), s == 0 ? tensors.begin() + half : tensors.end());
    for (const StoredTensor& t : part) index["weight_map"][t.name] = names[s];
    write_tensors(part, sharded / names[s]);
  }
  write_text(sharded / "model.safetensors.index.json", index.dump(2));
  ASSERT_FALSE(fs::exists(sharded / "model.safetensors"));
  EXPECT_EQ(losses_from(sharded, "shard_from_sharded", "--model.arch llama"),
            losses_from(hf("shard"), "shard_from_one", "--model.arch llama"));

  fs::remove(sharded / names[1]);
  const CliResult r = train_from(sharded, "shard_missing", "--model.arch llama");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("names the shard 'model-00002-of-00002.safetensors'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.safetensors.index.json"), std::string::npos) << r.output;
}

// bf16 and f16 tensors load as the f32 values they stand for: a run from them equals a run from
// f32 tensors that hold those rounded values, and not one from the unrounded ones.
TEST_F(HfImport, Bf16AndF16TensorsLoadAsTheirValues) {
  train_and_export("half", "");
  const std::vector<StoredTensor> tensors = read_tensors(hf("half") / "model.safetensors");
  const std::vector<double> exact = losses_from(hf("half"), "half_from_f32", "");
  for (DType dtype : {DType::BF16, DType::F16}) {
    const std::string tag = dtype == DType::BF16 ? "bf16" : "f16";
    std::vector<StoredTensor> stored, as_f32;
    for (const StoredTensor& t : tensors) {
      stored.push_back(rounded(t, dtype, false));
      as_f32.push_back(rounded(t, dtype, true));
    }
    const fs::path half = with_weights(hf("half"), "half_" + tag, stored);
    const fs::path f32 = with_weights(hf("half"), "half_" + tag + "_as_f32", as_f32);
    const std::vector<double> from_half = losses_from(half, "from_" + tag, "");
    EXPECT_EQ(from_half, losses_from(f32, "from_" + tag + "_as_f32", "")) << tag;
    EXPECT_NE(from_half, exact) << tag << " rounds the weights";
  }
}

// GPT-2 as published: saved from the base model, without the "transformer." prefix, with the
// attention masks as buffers; the masks are left out, and the note says so.
TEST_F(HfImport, NamesOfTheBaseModelAndLeftoverBuffers) {
  train_and_export("bare", "");
  std::vector<StoredTensor> tensors = read_tensors(hf("bare") / "model.safetensors");
  for (StoredTensor& t : tensors) {
    if (t.name.starts_with("transformer.")) t.name = t.name.substr(std::string("transformer.").size());
  }
  for (int l = 0; l < 2; ++l) {
    StoredTensor mask{"h." + std::to_string(l) + ".attn.bias", DType::F32, {1, 1, 32, 32}, {}};
    set_floats(mask, std::vector<float>(32 * 32, 1.0f));
    tensors.push_back(mask);
  }
  const fs::path bare = with_weights(hf("bare"), "bare_names", tensors);
  const CliResult r = train_from(bare, "from_bare", "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 tensors of '" + bare.string() + "' left out"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("h.0.attn.bias, h.1.attn.bias"), std::string::npos) << r.output;
  EXPECT_EQ(train_losses_of((g_root / "from_bare" / "metrics.jsonl").string()),
            losses_from(hf("bare"), "bare_from_hf", ""));
}

// `tessera sample` takes its model from config.json and its tokenizer from tokenizer.model, and
// generates from the folder what it generates from the checkpoint. Sampled, not greedy, from a
// model trained long enough to use its context: a few steps' model repeats one token greedily
// whatever its attention weights.
TEST_F(HfImport, SampleReadsTheFolder) {
  const fs::path run = train_and_export("sample", "--model.arch llama --train.steps 30");
  const std::string options = " --prompt 'the' --tokens 24 --seed 5 --ignore-eos";
  const CliResult from_hf = run_tessera("sample --checkpoint " + hf("sample").string() + options);
  const CliResult from_run = run_tessera("sample --checkpoint " + run.string() + options);
  ASSERT_EQ(from_hf.exit_code, 0) << from_hf.output;
  ASSERT_EQ(from_run.exit_code, 0) << from_run.output;
  EXPECT_GT(from_hf.output.size(), 10u) << from_hf.output;
  EXPECT_EQ(from_hf.output, from_run.output);

  const fs::path no_tokenizer = with_weights(hf("sample"), "sample_no_tokenizer",
                                             read_tensors(hf("sample") / "model.safetensors"));
  fs::remove(no_tokenizer / "tokenizer.model");
  const CliResult r = run_tessera("sample --checkpoint " + no_tokenizer.string() + options);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("has no tokenizer.model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find((no_tokenizer / "tokenizer.model").string()), std::string::npos) << r.output;
}

// Each broken folder is refused with what is wrong, where, and the fix.
TEST_F(HfImport, BrokenFoldersAreRefusedWithTheReason) {
  train_and_export("broken", "");
  const fs::path good = hf("broken");
  const std::vector<StoredTensor> tensors = read_tensors(good / "model.safetensors");
  const auto expect_refused = [&](const fs::path& folder, const std::string& name,
                                  const std::vector<std::string>& phrases, const std::string& extra = "") {
    const CliResult r = train_from(folder, name, extra);
    EXPECT_NE(r.exit_code, 0) << name;
    for (const std::string& phrase : phrases) EXPECT_NE(r.output.find(phrase), std::string::npos) << name << ": " << r.output;
  };

  const fs::path no_weights = with_weights(good, "no_weights", {});
  expect_refused(no_weights, "run_no_weights", {"has config.json but no weights", "model.safetensors.index.json"});

  std::vector<StoredTensor> missing = tensors;
  std::erase_if(missing, [](const StoredTensor& t) { return t.name == "transformer.h.1.mlp.c_fc.weight"; });
  expect_refused(with_weights(good, "missing_tensor", missing), "run_missing_tensor",
                 {"no tensor 'transformer.h.1.mlp.c_fc.weight'", (g_root / "missing_tensor" / "model.safetensors").string()});

  std::vector<StoredTensor> misshapen = tensors;
  find(misshapen, "transformer.h.0.attn.c_attn.weight")->shape = {96, 32};  // [out, in]: not Conv1D's layout
  expect_refused(with_weights(good, "misshapen", misshapen), "run_misshapen",
                 {"tensor 'transformer.h.0.attn.c_attn.weight'", (g_root / "misshapen" / "model.safetensors").string(),
                  "has shape [96, 32]", "needs [32, 96]"});

  std::vector<StoredTensor> integers = tensors;
  find(integers, "transformer.ln_f.weight")->dtype = DType::I32;
  expect_refused(with_weights(good, "integers", integers), "run_integers",
                 {"tensor 'transformer.ln_f.weight'", "is I32", "F32, BF16 or F16"});

  const fs::path mistral = with_weights(good, "mistral", tensors);
  nlohmann::json config = read_json(good / "config.json");
  config["model_type"] = "mistral";
  config["architectures"] = {"MistralForCausalLM"};
  write_text(mistral / "config.json", config.dump());
  expect_refused(mistral, "run_mistral", {"model_type \"mistral\"", "\"gpt2\" (GPT2LMHeadModel)", "\"llama\" (LlamaForCausalLM)"});

  const fs::path garbled = with_weights(good, "garbled", tensors);
  write_text(garbled / "config.json", "{\"model_type\": \"gpt2\", ");
  expect_refused(garbled, "run_garbled", {(garbled / "config.json").string(), "is not valid JSON"});

  // The run's model must be the folder's: every differing key with both values, and the fix.
  expect_refused(good, "run_other_shape",
                 {"model.n_layer: config.json n_layer = 2 vs config 3", "model.seq_len: config.json n_positions = 32 vs config 64",
                  "set those model keys to the folder's values"},
                 "--model.n_layer 3 --model.seq_len 64");
  expect_refused(good, "run_other_arch", {"model.arch: config.json model_type = gpt2 vs config llama"}, "--model.arch llama");
  expect_refused(good, "run_other_vocab",
                 {"model.vocab_size: config.json vocab_size = 300 vs config 512",
                  "tessera data prepare --tokenizer " + (good / "tokenizer.model").string()},
                 "--model.vocab_size 512");
}

// config.json as transformers publishes it: keys left out take transformers' defaults, GPT-2's
// n_inner is null; what tessera's models cannot hold is refused.
TEST(HfConfig, PublishedConfigsAndTheirRefusals) {
  const nlohmann::json gpt2 = nlohmann::json::parse(R"({
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
    "n_inner": null, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257})");
  const config::ModelConfig g = train::model_config_from_hf(gpt2, "gpt2/config.json");
  EXPECT_EQ(g.arch, config::Architecture::Gpt2);
  EXPECT_EQ(g.ffn(), 3072);
  EXPECT_TRUE(g.tied_embeddings);
  EXPECT_TRUE(g.bias);
  EXPECT_EQ(g.seq_len, 1024);
  EXPECT_EQ(g.parameter_count(), 124439808) << "GPT-2 small";

  const nlohmann::json llama = nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
    "torch_dtype": "float16", "use_cache": true, "vocab_size": 32000})");
  const config::ModelConfig l = train::model_config_from_hf(llama, "llama/config.json");
  EXPECT_EQ(l.arch, config::Architecture::Llama);
  EXPECT_FALSE(l.bias);
  EXPECT_FALSE(l.tied_embeddings);
  EXPECT_EQ(l.rope_theta, 10000.0f);
  EXPECT_EQ(l.parameter_count(), 6738415616) << "Llama-2-7B";

  // Mixtral-8x7B's config.json: a Llama with 8 experts in every layer, top-2, and the capacity
  // factor E / k at which tessera drops no token either.
  const nlohmann::json mixtral = nlohmann::json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000})");
  const config::ModelConfig m = train::model_config_from_hf(mixtral, "mixtral/config.json");
  EXPECT_EQ(m.arch, config::Architecture::Llama);
  EXPECT_EQ(m.moe_experts, 8);
  EXPECT_EQ(m.moe_top_k, 2);
  EXPECT_EQ(m.moe_every, 1);
  EXPECT_EQ(m.moe_capacity_factor, 4.0f);
  EXPECT_EQ(m.rope_theta, 1e6f);
  EXPECT_FALSE(m.bias);
  EXPECT_EQ(m.parameter_count(), 46702792704) << "Mixtral-8x7B";
  nlohmann::json no_theta = mixtral;
  no_theta.erase("rope_theta");
  EXPECT_EQ(train::model_config_from_hf(no_theta, "x/config.json").rope_theta, 1e6f) << "MixtralConfig's default";

  const auto refusal = [](nlohmann::json j) {
    try {
      train::model_config_from_hf(j, "x/config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  nlohmann::json scaled = llama;
  scaled["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_NE(refusal(scaled).find("rope_scaling"), std::string::npos) << refusal(scaled);
  nlohmann::json no_layers = llama;
  no_layers.erase("num_hidden_layers");
  EXPECT_NE(refusal(no_layers).find("x/config.json' has no \"num_hidden_layers\""), std::string::npos)
      << refusal(no_layers);
  nlohmann::json typeless = gpt2;
  typeless.erase("model_type");
  typeless["architectures"] = {"GPT2ForSequenceClassification"};
  EXPECT_NE(refusal(typeless).find("GPT2ForSequenceClassification, a model class tessera does not read"),
            std::string::npos) << refusal(typeless);
  // GPT-2's ungated activations that tessera has are read; others are refused naming the known ones.
  for (const auto& [name, activation] : {std::pair{"relu", config::Activation::Relu},
                                         std::pair{"relu2", config::Activation::Relu2},
                                         std::pair{"gelu_pytorch_tanh", config::Activation::Gelu}}) {
    nlohmann::json other = gpt2;
    other["activation_function"] = name;
    EXPECT_EQ(train::model_config_from_hf(other, "x/config.json").mlp_activation(), activation) << name;
  }
  nlohmann::json gelu = gpt2;
  gelu["activation_function"] = "gelu";  // the exact erf GELU, not tessera's
  EXPECT_NE(refusal(gelu).find("activation_function \"gelu\" is not one of tessera's"), std::string::npos)
      << refusal(gelu);
  EXPECT_NE(refusal(gelu).find("\"relu2\""), std::string::npos) << refusal(gelu);
  nlohmann::json relu_llama = llama;
  relu_llama["hidden_act"] = "relu";
  EXPECT_NE(refusal(relu_llama).find("hidden_act \"relu\""), std::string::npos) << refusal(relu_llama);
  nlohmann::json windowed = mixtral;
  windowed["sliding_window"] = 4096;
  EXPECT_NE(refusal(windowed).find("sliding_window = 4096 is shorter than the context"), std::string::npos)
      << refusal(windowed);
  nlohmann::json top3 = mixtral;
  top3["num_experts_per_tok"] = 3;
  EXPECT_NE(refusal(top3).find("model.moe_top_k = 3 is not supported"), std::string::npos) << refusal(top3);
  nlohmann::json odd_heads = gpt2;
  odd_heads["n_head"] = 7;
  EXPECT_NE(refusal(odd_heads).find("describes a model tessera cannot build"), std::string::npos)
      << refusal(odd_heads);
}

}  // namespace
