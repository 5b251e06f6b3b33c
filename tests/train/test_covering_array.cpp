// The covering array of the compatibility matrix (config/covering_array.h), built against the run
// config's checks: every pair that runs meets in some configuration, no configuration holds a
// refused pair or fails the run config, each runs on the fewest processes its features need (at
// most 8), the CI subset covers every pair with the default optimizer or schedule, the array is
// the same every time, the run config's check shapes it, and docs/compatibility.md is the table
// printed with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/covering_array.h"
#include "core/check.h"
#include "train/array_run.h"

using namespace tessera;
using config::Feature;
namespace fs = std::filesystem;

namespace {

const std::vector<config::ArrayConfiguration>& array() {
  static const std::vector<config::ArrayConfiguration> built = train::checked_covering_array();
  return built;
}

bool runs(Feature a, Feature b) {
  const config::Cell c = config::cell(a, b);
  return a != b && !c.same_key && c.refused_by.empty();
}

bool proves(const config::ArrayConfiguration& c, Feature a, Feature b) {
  return config::array_proves(c.settings, a, b);
}

std::string pair_name(Feature a, Feature b) {
  return fmt::format("{} with {}", config::feature_name(a), config::feature_name(b));
}

}  // namespace

TEST(CoveringArray, EveryPairThatRunsMeetsInAConfigurationThatMapsIt) {
  size_t pairs = 0, first = 0;
  for (const config::ArrayConfiguration& c : array()) first += c.first_covered.size();
  for (Feature a : config::all_features()) {
    for (Feature b : config::all_features()) {
      if (a >= b || !runs(a, b)) continue;
      ++pairs;
      const config::ArrayConfiguration* by = config::covering_configuration(array(), a, b);
      ASSERT_NE(by, nullptr) << pair_name(a, b);
      EXPECT_TRUE(proves(*by, a, b)) << pair_name(a, b) << " in configuration " << by->id;
      for (const config::ArrayConfiguration& c : array()) {
        if (c.id >= by->id) break;
        EXPECT_FALSE(proves(c, a, b)) << pair_name(a, b) << ": configuration " << c.id << " covers it before "
                                          << by->id;
      }
    }
  }
  // Each pair is mapped to one configuration, and only pairs that run are.
  EXPECT_EQ(first, pairs);
  EXPECT_GT(pairs, 700u);
  // Far fewer configurations than pairs: the array is worth running.
  EXPECT_LT(array().size(), pairs / 8);
}

TEST(CoveringArray, EveryConfigurationIsARunTheConfigAcceptsOnItsFewestProcesses) {
  for (const config::ArrayConfiguration& c : array()) {
    SCOPED_TRACE(fmt::format("configuration {}", c.id));
    EXPECT_TRUE(config::refusals_of(c.settings).empty());
    EXPECT_NO_THROW(train::array_run_config(c.settings));
    const train::RunConfig run = train::array_run_config(c.settings);
    EXPECT_EQ(int64_t{run.parallel.dp} * run.parallel.tp * run.parallel.pp, c.world);
    EXPECT_LE(c.world, 8);
    // tp and pp are 2 only where their features hold; dp 2 only where a feature needs data-parallel
    // ranks, which one process refuses or would not exercise.
    EXPECT_EQ(run.parallel.tp, config::feature_holds(Feature::TensorParallel, c.settings) ? 2 : 1);
    EXPECT_EQ(run.parallel.pp, config::feature_holds(Feature::Pipeline, c.settings) ? 2 : 1);
    const bool data_parallel = c.settings.zero_stage > 0 || c.settings.ep > 1 || c.settings.compression != config::CompressionMethod::None ||
                               c.settings.grad_dtype != "fp32" || c.settings.optimizer == config::OptimizerKind::OneBitAdam;
    EXPECT_EQ(run.parallel.dp, data_parallel ? 2 : 1);
    for (Feature f : c.features) EXPECT_TRUE(config::feature_holds(f, run.feature_settings())) << config::feature_name(f);
    // The reference runs in one process and holds none of the layout.
    const train::RunConfig reference = train::array_run_config(config::array_reference(c.settings));
    EXPECT_EQ(int64_t{reference.parallel.dp} * reference.parallel.tp * reference.parallel.pp, 1);
    EXPECT_EQ(reference.model.moe_experts, run.model.moe_experts);
  }
}

TEST(CoveringArray, TheCiSubsetCoversEveryPairWithTheDefaultOptimizerOrSchedule) {
  size_t ci = 0;
  for (const config::ArrayConfiguration& c : array()) ci += c.ci;
  EXPECT_GT(ci, 0u);
  EXPECT_LT(ci, array().size());
  for (Feature a : config::all_features()) {
    for (Feature b : config::all_features()) {
      if (a >= b || !runs(a, b)) continue;
      if (a != Feature::AdamW && b != Feature::AdamW && a != Feature::OneFOneB && b != Feature::OneFOneB) continue;
      const bool covered = std::any_of(array().begin(), array().end(),
                                       [&](const config::ArrayConfiguration& c) { return c.ci && proves(c, a, b); });
      EXPECT_TRUE(covered) << pair_name(a, b);
    }
  }
}

TEST(CoveringArray, IsTheSameEveryTime) {
  const std::vector<config::ArrayConfiguration> again = train::checked_covering_array();
  ASSERT_EQ(again.size(), array().size());
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(config::array_overrides(again[i].settings), config::array_overrides(array()[i].settings)) << i;
    EXPECT_EQ(again[i].first_covered, array()[i].first_covered) << i;
    EXPECT_EQ(again[i].ci, array()[i].ci) << i;
  }
}

// Two transforms exact together are proven together only by a configuration held exactly: a lossy
// one in the same run would hide their error under its bound.
TEST(CoveringArray, PairsOfExactTransformsAreProvenByExactConfigurations) {
  size_t exact_pairs = 0;
  for (const config::ArrayConfiguration& c : array()) {
    const bool exact = config::array_tolerance(c.settings) == config::ArrayTolerance::Exact;
    for (const auto& [a, b] : c.first_covered) {
      if (config::array_tolerance(config::pair_settings(a, b)) == config::ArrayTolerance::Exact) {
        ++exact_pairs;
        EXPECT_TRUE(exact) << pair_name(a, b) << " is first proven by configuration " << c.id << ", held loosely";
      }
    }
  }
  EXPECT_GT(exact_pairs, 300u);
  config::FeatureSettings s = config::pair_settings(Feature::TensorParallel, Feature::RecomputeFull);
  EXPECT_TRUE(config::array_proves(s, Feature::TensorParallel, Feature::RecomputeFull));
  s.compute = "bf16";
  EXPECT_FALSE(config::array_proves(s, Feature::TensorParallel, Feature::RecomputeFull));
  EXPECT_TRUE(config::array_proves(s, Feature::TensorParallel, Feature::Bf16));
}

// The lossy transforms are held to their parity tests' bounds, the rest exactly.
TEST(CoveringArray, ToleranceIsTheLoosestOfTheConfigurationsLossyFeatures) {
  config::FeatureSettings s;
  s.tp = 2;
  s.zero_stage = 1;
  EXPECT_EQ(config::array_tolerance(s), config::ArrayTolerance::Exact);
  s.compression = config::CompressionMethod::TopK;
  EXPECT_EQ(config::array_tolerance(s), config::ArrayTolerance::Compressed);
  s.optimizer = config::OptimizerKind::Adafactor;
  EXPECT_EQ(config::array_tolerance(s), config::ArrayTolerance::CompressedAdafactor);
  EXPECT_EQ(config::array_loss_bound(config::array_tolerance(s)), 0.01);
  s.optimizer = config::OptimizerKind::AdamW;
  s.compute = "bf16";
  EXPECT_EQ(config::array_tolerance(s), config::ArrayTolerance::MixedPrecision);
  EXPECT_EQ(config::array_loss_bound(config::array_tolerance(s)), 0.02);
  s = {};
  s.optimizer = config::OptimizerKind::Adam8bit;
  s.zero_stage = 3;
  EXPECT_EQ(config::array_tolerance(s), config::ArrayTolerance::Exact);
  s.tp = 2;
  EXPECT_EQ(config::array_tolerance(s), config::ArrayTolerance::ShardedEightBit);
  s = {};
  s.optimizer = config::OptimizerKind::OneBitAdam;
  EXPECT_EQ(config::array_tolerance(s), config::ArrayTolerance::OneBitAdam);
  EXPECT_EQ(config::array_reference(s).optimizer, config::OptimizerKind::AdamW);
  s = {};
  s.schedule = config::ScheduleKind::PipeDream2BW;
  s.pp = 2;
  s.delayed_update_after = 1;
  EXPECT_EQ(config::array_tolerance(s), config::ArrayTolerance::Exact);
  EXPECT_EQ(config::array_reference(s).schedule, config::ScheduleKind::PipeDream2BW);
  EXPECT_EQ(config::array_reference(s).pp, 1);
  EXPECT_EQ(config::array_reference(s).delayed_update_after, 1);
}

TEST(CoveringArray, DocumentIsTheGeneratedTableWithItsArray) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "TESSERA_SOURCE_DIR must point at the source tree (ctest sets it)";
  const fs::path path = fs::path(source) / "docs" / "compatibility.md";
  ASSERT_TRUE(fs::exists(path)) << "docs/compatibility.md is missing: tessera compatibility > docs/compatibility.md";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string markdown = config::compatibility_markdown(array());
  EXPECT_TRUE(text.str() == markdown) << "docs/compatibility.md is not the table in src/config/compatibility.cpp "
                                         "with its covering array; regenerate it with `tessera compatibility > "
                                         "docs/compatibility.md`";
  // Every pair that runs is trained by a parity test or the array.
  EXPECT_NE(markdown.find(", 0 untested)"), std::string::npos);
  EXPECT_EQ(markdown.find("| ○ |"), std::string::npos);
}

// The array asks its check about every configuration it makes: a pair the check refuses alone is an
// error that names it (the table and the run config disagree), and one it refuses only beside a
// third feature keeps that feature out.
TEST(CoveringArray, TheRunConfigsCheckShapesTheArray) {
  const auto no_tp_with_pp = [](const config::FeatureSettings& s) {
    return train::array_settings_run(s) && !(s.tp > 1 && s.pp > 1);
  };
  try {
    config::covering_array(no_tp_with_pp);
    ADD_FAILURE() << "a pair the check refuses was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the matrix says parallel.tp > 1 with parallel.pp > 1 runs, but the run "
                                         "config refuses the pair"),
              std::string::npos)
        << e.what();
  }
  const auto no_three = [](const config::FeatureSettings& s) {
    return train::array_settings_run(s) && !(s.tp > 1 && s.pp > 1 && s.zero_stage == 1);
  };
  const std::vector<config::ArrayConfiguration> shaped = config::covering_array(no_three);
  for (const config::ArrayConfiguration& c : shaped) {
    EXPECT_FALSE(c.settings.tp > 1 && c.settings.pp > 1 && c.settings.zero_stage == 1) << "configuration " << c.id;
  }
  EXPECT_TRUE(std::any_of(array().begin(), array().end(), [](const config::ArrayConfiguration& c) {
    return c.settings.tp > 1 && c.settings.pp > 1 && c.settings.zero_stage == 1;
  })) << "the unshaped array should hold the three together, or this test shows nothing";
}
