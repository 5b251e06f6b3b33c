// `tessera export --format hf`: a checkpoint trained by the program is exported, and a PyTorch
// reader that knows only the Hugging Face names and config.json (tests/train/hf_reader.py) computes
// the loss of a batch within 1e-5 of tessera's on the checkpoint, for GPT-2 with a tied head and
// Llama with an untied one. Also: the config and tokenizer files, and the refusals.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "data/dataset.h"
#include "io/safetensors.h"
#include "nn/gpt.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;
using namespace tessera;
using namespace tessera::testing;

namespace {

fs::path g_root, g_dataset;

const std::string kModel =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 "
    "--train.batch_size 4 --train.micro_batch_size 4 --train.eval_every 0 --train.eval_batches 1 "
    "--train.sample_tokens 0 --optim.warmup_steps 1 --optim.lr 0.01 --log.progress plain";

class Export : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = fs::temp_directory_path() / ("tessera_export_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }

  // Three steps at a high learning rate move every weight (biases and gains too) off its initial value.
  static fs::path train(const std::string& name, const std::string& extra) {
    const fs::path run = g_root / name;
    CliResult r = run_tessera("train --data.dir " + g_dataset.string() + " --train.out_dir " + run.string() + " " +
                              kModel + " --train.steps 3 " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return run;
  }
};

std::string run_command(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  *status = ::pclose(pipe);
  return out;
}

// tessera's loss of the checkpoint on the first B validation windows, and the batch written for the reader.
double tessera_loss(const fs::path& checkpoint, const fs::path& batch_path) {
  const std::string path = train::resolve_checkpoint(checkpoint.string(), "");
  const train::RunConfig config = train::checkpoint_run_config(train::read_checkpoint_manifest(path), path);
  MemoryAccountant memory;
  nn::GPT model(config.model, memory, 0);
  train::load_weights(path, config.model, {model.parameters(), model.parameters(), nullptr, {}});
  const data::Dataset dataset = data::open_dataset(g_dataset);
  const int B = 3, T = config.model.seq_len;
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (int i = 0; i < B * T; ++i) {
    const int64_t at = (i / T) * T + i % T;
    tokens[static_cast<size_t>(i)] = dataset.val->at(at);
    targets[static_cast<size_t>(i)] = dataset.val->at(at + 1);
  }
  io::SafeTensorsWriter batch;
  batch.add("tokens", DType::I32, {B, T}, tokens.data(), tokens.size() * 4);
  batch.add("targets", DType::I32, {B, T}, targets.data(), targets.size() * 4);
  batch.write(batch_path.string());
  nn::StepContext step{memory, model.parameters()};
  int64_t count = 0;
  const double sum = model.evaluate(step, tokens.data(), targets.data(), B, T, &count);
  return sum / static_cast<double>(count);
}

void expect_reader_matches(const fs::path& checkpoint, const fs::path& out, const std::string& model_type) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "TESSERA_SOURCE_DIR must point at the source tree (ctest sets it)";
  const fs::path batch = out.string() + ".batch.safetensors";
  const double want = tessera_loss(checkpoint, batch);
  int status = 0;
  const std::string printed = run_command(fmt::format("OMP_NUM_THREADS=2 /usr/bin/python3 {}/tests/train/hf_reader.py {} {}",
                                                      source, out.string(), batch.string()),
                                          &status);
  ASSERT_EQ(status, 0) << printed;
  const nlohmann::json result = nlohmann::json::parse(printed.substr(printed.rfind('{')));
  EXPECT_EQ(result["model_type"], model_type);
  const double got = result["loss"].get<double>();
  EXPECT_NEAR(got, want, 1e-5 * want) << "the Hugging Face layout computes another loss than tessera";
  // A trained model, not a uniform guess: the comparison would be weak near log(V).
  EXPECT_LT(want, std::log(300.0) - 0.5);
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_file(path.string())); }

}  // namespace

TEST_F(Export, Gpt2WithTiedHeadLoadsAndMatchesTheLoss) {
  const fs::path run = train("gpt2", "");
  const fs::path out = g_root / "gpt2_hf";
  CliResult r = run_tessera("export --format hf " + run.string() + " " + out.string());  // a run folder
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step_00000003"), std::string::npos) << r.output;
  expect_reader_matches(run, out, "gpt2");

  const nlohmann::json config = read_json(out / "config.json");
  EXPECT_EQ(config["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(config["n_positions"], 32);
  EXPECT_EQ(config["vocab_size"], 300);
  EXPECT_EQ(config["n_inner"], 128);
  EXPECT_EQ(config["tie_word_embeddings"], true);
  // The tokenizer trained by `data prepare` has <s> = 1 and </s> = 2.
  EXPECT_EQ(config["bos_token_id"], 1);
  EXPECT_EQ(config["eos_token_id"], 2);
  io::SafeTensorsFile weights = io::SafeTensorsFile::open((out / "model.safetensors").string());
  EXPECT_FALSE(weights.has("lm_head.weight")) << "a tied head is the token embedding";
  EXPECT_EQ(weights.entry("transformer.h.1.attn.c_attn.weight").shape, (Shape{32, 96})) << "Conv1D is [in, out]";
  EXPECT_EQ(weights.entry("transformer.h.0.mlp.c_proj.weight").shape, (Shape{128, 32}));
  EXPECT_EQ(read_file((out / "tokenizer.model").string()), read_file((g_dataset / "tokenizer.model").string()));
  const nlohmann::json tok = read_json(out / "tokenizer_config.json");
  EXPECT_EQ(tok["eos_token"], "</s>");
  EXPECT_EQ(tok["model_max_length"], 32);
}

TEST_F(Export, LlamaWithUntiedHeadLoadsAndMatchesTheLoss) {
  const fs::path run = train("llama", "--model.arch llama --model.tied_embeddings false --model.rope_theta 500");
  const fs::path out = g_root / "llama_hf";
  const fs::path step = run / "checkpoints" / "step_00000003";
  CliResult r = run_tessera("export " + step.string() + " " + out.string());  // a step folder; hf is the default
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_reader_matches(step, out, "llama");

  const nlohmann::json config = read_json(out / "config.json");
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(config["max_position_embeddings"], 32);
  EXPECT_EQ(config["intermediate_size"], 128);
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["rope_theta"], 500.0);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  io::SafeTensorsFile weights = io::SafeTensorsFile::open((out / "model.safetensors").string());
  EXPECT_EQ(weights.entry("lm_head.weight").shape, (Shape{300, 32}));
  EXPECT_EQ(weights.entry("model.layers.1.self_attn.k_proj.weight").shape, (Shape{32, 32}));
  EXPECT_FALSE(weights.has("model.layers.0.self_attn.q_proj.bias"));
}

// Grouped-query attention: 4 heads on 2 key/value heads; k_proj and v_proj hold the key/value
// heads' rows only, and the reader (which repeats them over their groups, as transformers does)
// gets the same loss. GPT-2 cannot hold it in the Hugging Face format, and says so.
TEST_F(Export, LlamaWithGroupedQueryAttentionLoadsAndMatchesTheLoss) {
  const fs::path run = train("llama_gqa", "--model.arch llama --model.n_head 4 --model.n_kv_head 2");
  const fs::path out = g_root / "llama_gqa_hf";
  const fs::path step = run / "checkpoints" / "step_00000003";
  CliResult r = run_tessera("export " + step.string() + " " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_reader_matches(step, out, "llama");
  const nlohmann::json config = read_json(out / "config.json");
  EXPECT_EQ(config["num_attention_heads"], 4);
  EXPECT_EQ(config["num_key_value_heads"], 2);
  io::SafeTensorsFile weights = io::SafeTensorsFile::open((out / "model.safetensors").string());
  EXPECT_EQ(weights.entry("model.layers.1.self_attn.q_proj.weight").shape, (Shape{32, 32}));
  EXPECT_EQ(weights.entry("model.layers.1.self_attn.k_proj.weight").shape, (Shape{16, 32}));
  EXPECT_EQ(weights.entry("model.layers.1.self_attn.v_proj.weight").shape, (Shape{16, 32}));

  const fs::path gpt2 = train("gpt2_gqa", "--model.n_head 4 --model.n_kv_head 2 --train.steps 1");
  r = run_tessera("export " + (gpt2 / "checkpoints" / "step_00000001").string() + " " + (g_root / "gpt2_gqa_hf").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("the Hugging Face GPT-2 model cannot hold"), std::string::npos) << r.output;
}

// Squared ReLU and ReLU on GPT-2 write transformers' names ("relu2", "relu"), and the reader
// (transformers' definitions) gets tessera's loss. What the Hugging Face classes cannot hold, an
// ungated Llama or a gated GPT-2, is refused in one line naming the key.
TEST_F(Export, Gpt2ActivationsAreWrittenAndTheOnesHfCannotHoldRefused) {
  for (const std::string activation : {"relu2", "relu"}) {
    const fs::path run = train("gpt2_" + activation, "--model.activation " + activation);
    const fs::path out = g_root / ("gpt2_" + activation + "_hf");
    CliResult r = run_tessera("export " + run.string() + " " + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_reader_matches(run, out, "gpt2");
    EXPECT_EQ(read_json(out / "config.json")["activation_function"], activation);
  }
  struct Case {
    std::string name, args, message;
  } cases[] = {
      {"gpt2_swiglu", "--model.activation swiglu",
       "export: the Hugging Face GPT-2 model has no gated MLP, so model.activation = \"swiglu\" cannot be written "
       "for model.arch = \"gpt2\""},
      {"llama_relu2", "--model.arch llama --model.activation relu2",
       "export: the Hugging Face Llama model's MLP is always gated, so model.activation = \"relu2\" cannot be "
       "written for model.arch = \"llama\""},
  };
  for (const Case& c : cases) {
    const fs::path run = train(c.name, c.args + " --train.steps 1");
    const fs::path out = g_root / (c.name + "_hf");
    CliResult r = run_tessera("export " + run.string() + " " + out.string());
    EXPECT_NE(r.exit_code, 0) << c.name;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out / "config.json")) << "a refused export writes nothing";
  }
}

TEST_F(Export, OutputFolderAndFormatAreChecked) {
  const fs::path run = train("small", "--train.steps 1");
  const fs::path out = g_root / "busy";
  fs::create_directories(out);
  std::ofstream(out / "notes.txt") << "mine";
  CliResult busy = run_tessera("export " + run.string() + " " + out.string());
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_NE(busy.output.find("exists and is not empty"), std::string::npos) << busy.output;
  EXPECT_NE(busy.output.find("--force"), std::string::npos) << busy.output;
  EXPECT_FALSE(fs::exists(out / "config.json")) << "a refused export writes nothing";

  CliResult forced = run_tessera("export --force " + run.string() + " " + out.string());
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  EXPECT_EQ(read_file((out / "notes.txt").string()), "mine") << "other files stay";

  CliResult format = run_tessera("export --format onnx " + run.string() + " " + (g_root / "onnx").string());
  EXPECT_NE(format.exit_code, 0);
  EXPECT_NE(format.output.find("unknown --format 'onnx'; the formats are:"), std::string::npos) << format.output;
  EXPECT_NE(format.output.find("hf: Hugging Face transformers"), std::string::npos) << format.output;

  CliResult missing = run_tessera("export " + (g_root / "nothing").string() + " " + (g_root / "out2").string());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("does not exist"), std::string::npos) << missing.output;
  CliResult empty_run = run_tessera("export " + g_dataset.string() + " " + (g_root / "out3").string());
  EXPECT_NE(empty_run.exit_code, 0);
  EXPECT_NE(empty_run.output.find("is not a checkpoint"), std::string::npos) << empty_run.output;
}
