// Encoded activations through the real program (exec/activation_encoding.h): the lossless
// encodings give bitwise the losses and checkpoints of the run without them — in one process,
// under dp 2 with ZeRO-3, pp 2 and tp 2, with selective recomputation and with the stash offloaded
// —, the lossy ones train close to it, and every run measures the activation peak its start line
// predicts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;
fs::path g_dataset;

// A ReLU MLP: its input is read only for its sign and its output is mostly zeros, so the lossless
// encodings have something to do.
const std::string kModel =
    "--model.n_layer 3 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 --model.dropout 0.1 "
    "--model.activation relu --train.batch_size 8 --train.micro_batch_size 2 --train.eval_every 0 "
    "--train.eval_batches 2 --train.sample_tokens 0 --optim.warmup_steps 2 --log.progress plain --log.every 1 "
    "--log.peak_gflops 1000 --train.steps 4 --parallel.bucket_mb 0.01";

std::string train_args(const fs::path& out, const std::string& extra) {
  return "train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() + " " + kModel + " " + extra;
}

class ActivationEncoding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the launched jobs run under mpirun
    g_root = fs::temp_directory_path() / ("tessera_encoding_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

struct Layout {
  std::string name;
  int ranks;
  std::string keys;
  std::vector<std::string> files;
};

const Layout kLayouts[] = {
    {"one", 1, "", {"model.safetensors", "optimizer.rank00000.safetensors"}},
    {"dp2_zero3", 2, "--parallel.dp 2 --parallel.zero_stage 3",
     {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"}},
    {"pp2", 2, "--parallel.pp 2 --parallel.stage_layers 1 2", {"model.safetensors"}},
    {"tp2", 2, "--parallel.tp 2", {"model.safetensors"}},
    {"one_selective", 1, "--memory.recompute selective", {"model.safetensors"}},
    {"one_offloaded", 1, "--memory.offload_activations nvme", {"model.safetensors"}},
};

std::string launcher(const Layout& l) { return l.ranks == 1 ? "" : fmt::format("launch -n {} -- ", l.ranks); }

}  // namespace

TEST_F(ActivationEncoding, LosslessEncodingGivesTheSameRunUnderEveryLayout) {
  for (const Layout& l : kLayouts) {
    SCOPED_TRACE(l.name);
    const fs::path plain = g_root / (l.name + "_plain"), encoded = g_root / (l.name + "_lossless");
    CliResult a = run_tessera(launcher(l) + train_args(plain, l.keys));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CliResult b = run_tessera(launcher(l) + train_args(encoded, l.keys + " --memory.activation_encoding lossless"));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_EQ(train_losses_of((plain / "metrics.jsonl").string()), train_losses_of((encoded / "metrics.jsonl").string()));
    for (const std::string& file : l.files) {
      EXPECT_EQ(read_file((plain / "checkpoints" / "step_00000004" / file).string()),
                read_file((encoded / "checkpoints" / "step_00000004" / file).string()))
          << file << " differs with the activations encoded";
    }
    const nlohmann::json line = last_train_line((encoded / "metrics.jsonl").string());
    const nlohmann::json& e = line["memory"]["encoded_activations"];
    // Selective recomputation drops the ReLU's output and rebuilds it from the input, which it then
    // reads for its values: nothing is left for the lossless forms.
    if (l.keys.find("selective") != std::string::npos) {
      EXPECT_EQ(e["from"].get<double>(), 0.0) << e.dump();
      continue;
    }
    // The ReLU's input went as sign bits and its output in the sparse form, and what was encoded shrank.
    EXPECT_TRUE(e["forms"].contains("sign")) << e.dump();
    EXPECT_TRUE(e["forms"].contains("sparse")) << e.dump();
    EXPECT_LT(e["to"].get<double>(), e["from"].get<double>()) << e.dump();
    const nlohmann::json plain_line = last_train_line((plain / "metrics.jsonl").string());
    EXPECT_LT(line["memory"]["activations"].get<double>(), plain_line["memory"]["activations"].get<double>());
    // The sparse form's size depends on the values: the prediction is a bound.
    if (l.ranks == 1) {
      EXPECT_LE(line["memory"]["activations"].get<double>() / 1048576.0, predicted_activation_peak(b.output) + 0.05)
          << b.output;
    }
  }
}

TEST_F(ActivationEncoding, LossyEncodingsTrainCloseToTheRunWithoutAndMeetTheirPrediction) {
  const Layout& one = kLayouts[0];
  const fs::path plain = g_root / "lossy_plain";
  CliResult a = run_tessera(train_args(plain, one.keys));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::vector<double> reference = train_losses_of((plain / "metrics.jsonl").string());
  const double plain_peak = last_train_line((plain / "metrics.jsonl").string())["memory"]["activations"].get<double>();
  struct Case {
    std::string encoding;
    std::string extra;
    double least_ratio;  // of the bytes encoded, before over after
  } cases[] = {{"fp8", "", 3.5}, {"gist", "", 2.0}, {"fp8", " --model.activation gelu", 3.5},
               {"fp8", " --precision.compute bf16", 1.9}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.encoding + c.extra);
    const fs::path out = g_root / ("lossy_" + c.encoding + std::to_string(c.extra.size()));
    CliResult b = run_tessera(train_args(out, "--memory.activation_encoding " + c.encoding + c.extra));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    const std::vector<double> losses = train_losses_of((out / "metrics.jsonl").string());
    ASSERT_EQ(losses.size(), reference.size());
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_TRUE(std::isfinite(losses[i]));
      if (c.extra.empty()) EXPECT_NEAR(losses[i], reference[i], 0.02 * reference[i]) << "step " << i + 1;
    }
    if (c.extra.empty()) EXPECT_NE(losses, reference) << "a lossy encoding changed nothing";
    const nlohmann::json line = last_train_line((out / "metrics.jsonl").string());
    const nlohmann::json& e = line["memory"]["encoded_activations"];
    EXPECT_GE(e["from"].get<double>() / e["to"].get<double>(), c.least_ratio) << e.dump();
    // fp8, bf16 and sign bits take a size the values do not change: the start line's prediction is
    // what the allocator measures (gist's sparse form may come in under it).
    const double measured = line["memory"]["activations"].get<double>() / 1048576.0;
    if (c.encoding == "fp8") {
      EXPECT_NEAR(measured, predicted_activation_peak(b.output), 0.05) << b.output;
    } else {
      EXPECT_LE(measured, predicted_activation_peak(b.output) + 0.05) << b.output;
    }
    if (c.extra.empty()) EXPECT_LT(line["memory"]["activations"].get<double>(), plain_peak);
  }
}

TEST_F(ActivationEncoding, OffloadingMovesTheEncodedBytes) {
  const fs::path encoded = g_root / "moved_fp8", both = g_root / "moved_fp8_nvme", dense = g_root / "moved_nvme";
  CliResult a = run_tessera(train_args(encoded, "--memory.activation_encoding fp8"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  CliResult b = run_tessera(train_args(both, "--memory.activation_encoding fp8 --memory.offload_activations nvme"));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  CliResult c = run_tessera(train_args(dense, "--memory.offload_activations nvme"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(train_losses_of((encoded / "metrics.jsonl").string()), train_losses_of((both / "metrics.jsonl").string()));
  const double written_encoded = last_train_line((both / "metrics.jsonl").string())["memory"]["nvme_written"].get<double>();
  const double written_dense = last_train_line((dense / "metrics.jsonl").string())["memory"]["nvme_written"].get<double>();
  EXPECT_GT(written_encoded, 0.0);
  EXPECT_LT(written_encoded, written_dense / 2.5);
}

TEST_F(ActivationEncoding, AnUnknownEncodingIsRefusedNamingTheChoices) {
  CliResult r = run_tessera(train_args(g_root / "unknown", "--memory.activation_encoding zip"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("memory.activation_encoding = \"zip\" is not known"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"fp8\""), std::string::npos) << r.output;
}
