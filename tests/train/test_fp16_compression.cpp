// fp16 with a compressor that keeps error feedback (top-k, one-bit, PowerSGD) at dp 2. A step the
// loss scale skips for an overflow leaves the compressor's state as the step found it: every bucket
// is checked before its compressor sees it, and the state taken as the step began is put back. So
// after any number of skipped steps the residuals are still zero and PowerSGD's warm-start Q is
// still its first one; and a run whose first steps overflow trains on, finite, as the scale falls.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;
fs::path g_dataset;

const std::string kRun =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 --train.batch_size 8 "
    "--train.micro_batch_size 2 --train.eval_every 0 --train.sample_tokens 0 --parallel.dp 2 "
    "--precision.compute fp16 --log.progress plain --log.every 1";

class Fp16Compression : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the launched jobs run under mpirun
    g_root = fs::temp_directory_path() / ("tessera_fp16_compression_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }

  static CliResult train(const fs::path& out, const std::string& keys) {
    return run_tessera("launch -n 2 -- train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() +
                       " " + kRun + " " + keys);
  }
};

// Every tensor of a rank's compressor state in the run's last checkpoint, as floats.
std::map<std::string, std::vector<float>> compressor_state(const fs::path& run, int steps, int rank) {
  const fs::path file = run / "checkpoints" / fmt::format("step_{:08d}", steps) /
                        fmt::format("compression.rank{:05d}.safetensors", rank);
  const tessera::io::SafeTensorsFile f = tessera::io::SafeTensorsFile::open(file.string());
  std::map<std::string, std::vector<float>> out;
  for (const std::string& name : f.names()) {
    const tessera::Tensor t = f.view(name, tessera::DType::F32);
    const float* x = t.data<float>();
    out[name].assign(x, x + t.numel());
  }
  return out;
}

std::vector<int> skipped_flags(const fs::path& run) {
  std::vector<int> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == "train") out.push_back(j["skipped"].get<bool>() ? 1 : 0);
  }
  return out;
}

TEST_F(Fp16Compression, SkippedStepsLeaveTheCompressorsStateAsTheyFoundIt) {
  for (const std::string method : {"topk", "onebit", "powersgd"}) {
    SCOPED_TRACE(method);
    // A loss scale of 1e9 overflows the first eight steps (the scale halves each time); two and
    // five skipped steps must leave the same state, the one the compressor started with.
    const fs::path two = g_root / (method + "_two"), five = g_root / (method + "_five");
    const std::string keys = "--parallel.compression " + method + " --precision.init_scale 1e9";
    CliResult a = train(two, keys + " --train.steps 2");
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CliResult b = train(five, keys + " --train.steps 5");
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_EQ(skipped_flags(two), (std::vector<int>{1, 1}));
    EXPECT_EQ(skipped_flags(five), (std::vector<int>{1, 1, 1, 1, 1}));
    for (int rank = 0; rank < 2; ++rank) {
      const auto after_two = compressor_state(two, 2, rank), after_five = compressor_state(five, 5, rank);
      ASSERT_FALSE(after_two.empty());
      EXPECT_EQ(after_two, after_five) << "rank " << rank;
      for (const auto& [name, values] : after_two) {
        for (float v : values) {
          ASSERT_TRUE(std::isfinite(v)) << name;
          // The error feedback holds what earlier steps did not send: nothing yet.
          if (name.find("residual") != std::string::npos) ASSERT_EQ(v, 0.0f) << name;
        }
      }
    }
  }
}

TEST_F(Fp16Compression, ARunWhoseFirstStepsOverflowTrainsOn) {
  for (const std::string method : {"topk", "onebit", "powersgd"}) {
    SCOPED_TRACE(method);
    const fs::path out = g_root / (method + "_trains");
    CliResult r = train(out, "--parallel.compression " + method + " --precision.init_scale 1e9 --train.steps 16");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<int> skipped = skipped_flags(out);
    ASSERT_EQ(skipped.size(), 16u);
    EXPECT_EQ(skipped.front(), 1);
    EXPECT_EQ(skipped.back(), 0);
    const std::vector<double> losses = train_losses_of((out / "metrics.jsonl").string());
    for (double l : losses) EXPECT_TRUE(std::isfinite(l));
    EXPECT_LT(losses.back(), losses.front());
    for (int rank = 0; rank < 2; ++rank) {
      for (const auto& [name, values] : compressor_state(out, 16, rank)) {
        for (float v : values) ASSERT_TRUE(std::isfinite(v)) << name;
      }
    }
  }
}

}  // namespace
