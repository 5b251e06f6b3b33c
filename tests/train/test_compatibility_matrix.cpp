// The run config refuses exactly the pairs of the compatibility table (config/compatibility.h), with
// the table's words, and accepts every other pair: for each pair of features, a small valid config
// with both turned on is validated.
#include <gtest/gtest.h>

#include "config/compatibility.h"
#include "train/run_config.h"

using namespace tessera;
using namespace tessera::train;
using config::Feature;

namespace {

// A small valid run with the settings of `s`: dp 2 where a feature needs data parallelism, a batch
// that every pipeline of the matrix can split (8 microbatches of one sequence, 4 per rank at dp 2).
RunConfig config_with(const config::FeatureSettings& s) {
  RunConfig c;
  c.vocab_from_data = false;
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.vocab_size = 128;
  c.model.seq_len = 32;
  c.model.moe_experts = static_cast<int>(s.moe_experts);
  c.train.steps = 10;
  c.train.batch_size = 8;
  c.train.micro_batch_size = 1;
  c.parallel.tp = s.tp;
  c.parallel.sp = s.sp;
  c.parallel.ep = s.ep;
  c.parallel.pp = s.pp;
  c.parallel.zero_stage = s.zero_stage;
  c.parallel.schedule = s.schedule;
  c.parallel.virtual_stages = s.schedule == config::ScheduleKind::Interleaved ? 2 : 1;
  c.parallel.compression = s.compression;
  c.parallel.grad_dtype = s.grad_dtype;
  c.precision.compute = s.compute;
  c.memory.recompute = s.recompute;
  c.memory.activation_encoding = s.activation_encoding;
  if (config::recompute_takes_budget(s.recompute)) c.memory.activation_budget_mb = 64;
  c.memory.offload_activations = s.offload_activations;
  c.memory.offload_optimizer = s.offload_optimizer;
  c.memory.offload_params = s.offload_params;
  c.optim.delayed_update_after = s.delayed_update_after;
  c.optim.kind = s.optimizer;
  const bool data_parallel = s.zero_stage > 0 || s.ep > 1 || s.compression != config::CompressionMethod::None ||
                             s.grad_dtype != "fp32" || s.optimizer == config::OptimizerKind::OneBitAdam;
  c.parallel.dp = data_parallel ? 2 : 1;
  return c;
}

std::string error_of(const RunConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string pair_name(Feature a, Feature b) {
  return fmt::format("{} with {}", config::feature_name(a), config::feature_name(b));
}

}  // namespace

TEST(CompatibilityMatrix, EveryFeatureAloneIsAValidConfig) {
  for (Feature f : config::all_features()) {
    const RunConfig c = config_with(config::with_feature({}, f));
    EXPECT_EQ(error_of(c), "") << config::feature_name(f);
    EXPECT_TRUE(config::feature_holds(f, c.feature_settings())) << config::feature_name(f);
  }
}

TEST(CompatibilityMatrix, EveryRefusedPairIsRefusedWhenTheConfigIsReadWithTheTablesWords) {
  size_t refused = 0;
  for (Feature a : config::all_features()) {
    for (Feature b : config::all_features()) {
      const config::Cell cell = config::cell(a, b);
      if (a >= b || cell.same_key || cell.refused_by.empty()) continue;
      ++refused;
      const RunConfig c = config_with(config::pair_settings(a, b));
      ASSERT_TRUE(config::feature_holds(a, c.feature_settings()) && config::feature_holds(b, c.feature_settings()));
      const std::string error = error_of(c);
      const std::optional<std::string> want = config::compatibility_refusal(c.feature_settings());
      ASSERT_TRUE(want.has_value()) << pair_name(a, b);
      EXPECT_EQ(error, "config: " + *want) << pair_name(a, b);
      EXPECT_NE(error.find(cell.refused_by.front()->reason), std::string::npos) << pair_name(a, b) << ": " << error;
      EXPECT_NE(error.find(cell.refused_by.front()->nearest), std::string::npos) << pair_name(a, b) << ": " << error;
    }
  }
  EXPECT_GT(refused, 30u);
}

TEST(CompatibilityMatrix, EveryPairThatRunsPassesTheConfig) {
  size_t runs = 0;
  for (Feature a : config::all_features()) {
    for (Feature b : config::all_features()) {
      const config::Cell cell = config::cell(a, b);
      if (a >= b || cell.same_key || !cell.refused_by.empty()) continue;
      ++runs;
      const RunConfig c = config_with(config::pair_settings(a, b));
      EXPECT_EQ(error_of(c), "") << pair_name(a, b);
      EXPECT_TRUE(config::feature_holds(a, c.feature_settings()) && config::feature_holds(b, c.feature_settings()))
          << pair_name(a, b);
    }
  }
  EXPECT_GT(runs, 300u);
}

// What the matrix's minimal configs leave out: the values of each setting there, and the
// combinations the engine refused only once it was built, now refused when the config is read.
TEST(CompatibilityMatrix, RefusalsNameTheValuesGivenAndMovedOnesComeAtConfigTime) {
  config::FeatureSettings s;
  s.pp = 4;
  s.zero_stage = 3;
  s.offload_params = "nvme";
  s.offload_optimizer = "nvme";
  RunConfig c = config_with(s);
  c.model.n_layer = 8;
  EXPECT_EQ(error_of(c).find("config: memory.offload_params = \"nvme\" with parallel.pp = 4: the nvme tier holds"), 0u)
      << error_of(c);

  // ZeRO-3 with 2bw at pp = 1: the engine refused it at start-up; the config now does.
  s = {};
  s.schedule = config::ScheduleKind::PipeDream2BW;
  s.zero_stage = 3;
  EXPECT_NE(error_of(config_with(s)).find("config: parallel.schedule = \"2bw\" with parallel.zero_stage = 3: ZeRO-3 "
                                          "gathers the working copies"),
            std::string::npos)
      << error_of(config_with(s));

  // 2BW with fewer microbatches than stages: the schedule generator refused it at start-up.
  s = {};
  s.schedule = config::ScheduleKind::PipeDream2BW;
  s.pp = 4;
  c = config_with(s);
  c.train.batch_size = 2;
  EXPECT_NE(error_of(c).find("config: parallel.schedule = \"2bw\" with parallel.pp = 4 needs at least as many "
                             "microbatches per step as stages, but train.batch_size / (train.micro_batch_size × "
                             "parallel.dp) = 2"),
            std::string::npos)
      << error_of(c);
  EXPECT_NE(error_of(c).find("for example set train.batch_size = 4"), std::string::npos) << error_of(c);
  c.train.batch_size = 4;
  EXPECT_EQ(error_of(c), "");
}

// fp16 with error-feedback compression was refused while a step skipped for an overflow left its
// non-finite gradient in the compressor's error feedback, so every later step overflowed too (a dp 2
// run with an initial scale of 1e9 skipped 29 or all 30 of 30 steps with topk, onebit or powersgd, 8
// with qsgd or none). Skipped steps now put the compressor's state back (test_fp16_compression), and
// the pair is accepted. Adafactor over tensor- or expert-parallel blocks ran but did not train as it
// should: its per-matrix sums were added over the group as if the blocks were ZeRO shards (tp 2
// drifted 1.3 % from one process in 10 steps, where LAMB and ZeRO stay exact). Each block's terms
// now go to the matrix's global rows and columns (parallel_tensor_parallel_2 and _4 hold tp to one
// process). The experts' stacks split over ep take the same path, each rank's experts adding to
// their global rows (parallel_moe_2 and _4 hold ep to one process), and are accepted too.
TEST(CompatibilityMatrix, ErrorFeedbackUnderFp16AndAdafactorUnderTpAndEpAreAccepted) {
  config::FeatureSettings s;
  s.compute = "fp16";
  for (const config::CompressionMethod method : {config::CompressionMethod::TopK, config::CompressionMethod::OneBit,
                                                 config::CompressionMethod::PowerSgd, config::CompressionMethod::Qsgd}) {
    s.compression = method;
    EXPECT_EQ(error_of(config_with(s)), "") << config::compression_name(method);
  }
  s.compute = "bf16";
  s.compression = config::CompressionMethod::OneBit;
  EXPECT_EQ(error_of(config_with(s)), "");

  s = {};
  s.optimizer = config::OptimizerKind::Adafactor;
  s.tp = 2;
  EXPECT_EQ(error_of(config_with(s)), "") << "each block's terms go to the matrix's global rows and columns";
  s.tp = 1;
  s.zero_stage = 3;
  s.moe_experts = 2;
  EXPECT_EQ(error_of(config_with(s)), "") << "ZeRO shards Adafactor exactly, and experts replicated over dp are whole";
  s.zero_stage = 0;
  s.ep = 2;
  EXPECT_EQ(error_of(config_with(s)), "") << "each expert's terms go to the stack's global rows and columns";
}
