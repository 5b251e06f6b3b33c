// The compatibility table itself: consistent with its features, and citing only tests that exist.
// (That the run config refuses exactly its refused pairs is tests/train/test_compatibility_matrix.cpp;
// that docs/compatibility.md is the table printed with its covering array,
// tests/train/test_covering_array.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>

#include "config/compatibility.h"

using namespace tessera::config;
namespace fs = std::filesystem;

namespace {

fs::path source_dir() {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  return source != nullptr ? fs::path(source) : fs::path();
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> files_under(const fs::path& dir, const std::function<bool(const fs::path&)>& wanted) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && wanted(entry.path())) out.push_back(entry.path());
  }
  return out;
}

// Whether a CMakeLists.txt of tests/ registers ctest `name`: as written, or as
// `NAME <stem>${ranks}` inside `foreach(ranks ...)` listing the number the name ends in.
bool registered_in_cmake(const std::string& name, const std::vector<std::string>& cmake_files) {
  std::smatch m;
  const bool numbered = std::regex_match(name, m, std::regex(R"((.*_)(\d+))"));
  for (const std::string& text : cmake_files) {
    if (text.find("NAME " + name + " ") != std::string::npos) return true;
    if (!numbered) continue;
    std::istringstream lines(text);
    std::vector<std::string> ranks;
    for (std::string line; std::getline(lines, line);) {
      std::smatch loop;
      if (std::regex_search(line, loop, std::regex(R"(foreach\(ranks ([0-9 ]+)\))"))) {
        std::istringstream values(loop[1].str());
        ranks.assign(std::istream_iterator<std::string>(values), std::istream_iterator<std::string>());
      } else if (line.find("endforeach(") != std::string::npos) {
        ranks.clear();
      } else if (line.find("NAME " + m[1].str() + "${ranks}") != std::string::npos &&
                 std::find(ranks.begin(), ranks.end(), m[2].str()) != ranks.end()) {
        return true;
      }
    }
  }
  return false;
}

// Whether a test source of tests/ defines GoogleTest case `Suite.Case` (its ctest name).
bool defined_in_sources(const std::string& name, const std::vector<std::string>& sources) {
  const size_t dot = name.find('.');
  const std::string suite = name.substr(0, dot), test = name.substr(dot + 1);
  for (const std::string& text : sources) {
    for (const char* macro : {"TEST(", "TEST_F("}) {
      if (text.find(std::string(macro) + suite + ", " + test + ")") != std::string::npos) return true;
    }
  }
  return false;
}

}  // namespace

TEST(CompatibilityMatrix, EveryTestNamedIsRegistered) {
  ASSERT_FALSE(source_dir().empty()) << "TESSERA_SOURCE_DIR must point at the source tree (ctest sets it)";
  std::vector<std::string> cmake, sources;
  for (const fs::path& p : files_under(source_dir() / "tests", [](const fs::path& f) {
         return f.filename() == "CMakeLists.txt";
       })) {
    cmake.push_back(read_file(p));
  }
  for (const fs::path& p : files_under(source_dir() / "tests", [](const fs::path& f) {
         return f.extension() == ".cpp";
       })) {
    sources.push_back(read_file(p));
  }
  ASSERT_FALSE(cmake.empty());
  // Each form can fail: a name that is not there is not found.
  EXPECT_TRUE(registered_in_cmake("parallel_moe_4", cmake));
  EXPECT_FALSE(registered_in_cmake("parallel_moe_3", cmake));
  EXPECT_FALSE(defined_in_sources("ParallelTraining.NoSuchCase", sources));
  for (const TestedPair& t : tested_pairs()) {
    for (std::string_view view : t.tests) {
      const std::string name(view);
      const bool found = name.find('.') != std::string::npos ? defined_in_sources(name, sources)
                                                             : registered_in_cmake(name, cmake);
      EXPECT_TRUE(found) << feature_name(t.a) << " with " << feature_name(t.b) << " cites '" << name
                         << "', which no CMakeLists.txt or test source under tests/ defines";
    }
  }
}

TEST(CompatibilityMatrix, FeaturesAreDistinctAndEachTurnsOnAlone) {
  std::set<std::string_view> names;
  for (Feature f : all_features()) {
    EXPECT_TRUE(names.insert(feature_name(f)).second) << feature_name(f);
    EXPECT_TRUE(feature_name(f).starts_with(feature_key(f))) << feature_name(f);
    const FeatureSettings alone = with_feature({}, f);
    EXPECT_TRUE(feature_holds(f, alone)) << feature_name(f);
    // Only the features it brings, and the default schedule and optimizer, hold beside it.
    for (Feature g : all_features()) {
      if (g == f || !feature_holds(g, alone)) continue;
      const bool brought = (f == Feature::SequenceParallel && g == Feature::TensorParallel) ||
                           (f == Feature::ExpertParallel && g == Feature::Moe) ||
                           (f == Feature::OffloadActivationsAuto && g == Feature::RecomputeOptimal) ||
                           (f == Feature::OffloadParams && (g == Feature::Zero3 || g == Feature::OffloadOptimizer));
      const bool default_choice = (g == Feature::OneFOneB && feature_key(f) != "parallel.schedule") ||
                                  (g == Feature::AdamW && feature_key(f) != "optim.name");
      EXPECT_TRUE(brought || default_choice) << feature_name(f) << " turns on " << feature_name(g);
    }
  }
  EXPECT_EQ(names.size(), kFeatureCount);
}

TEST(CompatibilityMatrix, EveryPairRunsOrIsRefusedAndTheMatrixIsSymmetric) {
  size_t refused = 0;
  for (Feature a : all_features()) {
    for (Feature b : all_features()) {
      if (a == b) continue;
      const Cell ab = cell(a, b), ba = cell(b, a);
      EXPECT_EQ(ab.same_key, ba.same_key);
      EXPECT_EQ(ab.refused_by, ba.refused_by) << feature_name(a) << " / " << feature_name(b);
      EXPECT_EQ(ab.tested, ba.tested);
      if (ab.same_key) continue;
      const FeatureSettings s = pair_settings(a, b);
      EXPECT_TRUE(feature_holds(a, s) && feature_holds(b, s)) << feature_name(a) << " with " << feature_name(b);
      EXPECT_EQ(compatibility_refusal(s).has_value(), !ab.refused_by.empty());
      refused += !ab.refused_by.empty();
    }
  }
  EXPECT_GT(refused, 0u);
}

TEST(CompatibilityMatrix, RefusalsJoinDifferentSettingsAndEachRefusesItsPairs) {
  for (const Refusal& r : refusals()) {
    EXPECT_FALSE(r.first.empty() || r.second.empty() || r.reason.empty());
    EXPECT_TRUE(r.nearest.starts_with("use ")) << r.nearest;
    for (Feature a : r.first) {
      for (Feature b : r.second) {
        EXPECT_NE(feature_key(a), feature_key(b)) << r.reason;
        const Cell c = cell(a, b);
        EXPECT_NE(std::find(c.refused_by.begin(), c.refused_by.end(), &r), c.refused_by.end())
            << feature_name(a) << " with " << feature_name(b) << " is not refused by its own rule";
      }
    }
  }
}

TEST(CompatibilityMatrix, TestedPairsRunAndAreListedOnce) {
  std::set<std::pair<Feature, Feature>> seen;
  for (const TestedPair& t : tested_pairs()) {
    EXPECT_FALSE(t.tests.empty());
    const Cell c = cell(t.a, t.b);
    EXPECT_FALSE(c.same_key) << feature_name(t.a) << " with " << feature_name(t.b);
    EXPECT_TRUE(c.refused_by.empty()) << feature_name(t.a) << " with " << feature_name(t.b)
                                      << " is refused, yet a test is named for it";
    EXPECT_EQ(c.tested, &t);
    EXPECT_TRUE(seen.insert(std::minmax(t.a, t.b)).second) << feature_name(t.a) << " with " << feature_name(t.b);
  }
}

// Every refusal says, for each of DeepSpeed, Megatron-LM and torchtitan, whether it composes the
// pair, so a user who meets one knows whether the gap is this engine's alone or the field's.
TEST(CompatibilityMatrix, EveryRefusalSaysWhatEachAnchorSystemDoes) {
  for (const Refusal& r : refusals()) {
    for (std::string_view system : {"DeepSpeed", "Megatron-LM", "torchtitan"}) {
      EXPECT_NE(r.reason.find(system), std::string_view::npos) << system << " is not named in: " << r.reason;
    }
  }
}

TEST(CompatibilityMatrix, MessagesNameBothSettingsWithTheirValuesTheReasonAndTheFix) {
  FeatureSettings s;
  s.pp = 4;
  s.zero_stage = 3;
  // ZeRO-3 runs under pipelines; its shard does not go to the nvme tier there.
  EXPECT_FALSE(compatibility_refusal(s).has_value());
  s.offload_params = "nvme";
  s.offload_optimizer = "nvme";
  std::optional<std::string> m = compatibility_refusal(s);
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(m->starts_with("memory.offload_params = \"nvme\" with parallel.pp = 4: the nvme tier holds a rank's "
                             "parameter shard as one contiguous range"))
      << *m;
  EXPECT_NE(m->find("; use memory.offload_params = \"none\" with parallel.pp > 1"), std::string::npos) << *m;

  s = {};
  s.moe_experts = 8;
  s.tp = 2;
  s.sp = true;
  // MoE under sequence parallelism routes the gathered sequence (nn/moe.h), with experts split or not.
  EXPECT_FALSE(compatibility_refusal(s).has_value());
  s.ep = 2;
  EXPECT_FALSE(compatibility_refusal(s).has_value());

  // MoE runs in 16 bits, its experts split or not.
  s = {};
  s.moe_experts = 8;
  s.ep = 4;
  for (const char* compute : {"bf16", "fp16"}) {
    s.compute = compute;
    EXPECT_FALSE(compatibility_refusal(s).has_value()) << compute;
  }
  // And under ZB-H1, whose weight halves form the experts' gradients (nn/moe.h).
  s = {};
  s.moe_experts = 8;
  s.pp = 2;
  s.schedule = ScheduleKind::ZeroBubbleH1;
  for (int ep : {1, 4}) {
    s.ep = ep;
    EXPECT_FALSE(compatibility_refusal(s).has_value()) << "ep " << ep;
  }

  s = {};
  s.ep = 2;
  s.moe_experts = 2;
  // 1-bit Adam and compressed gradients run under expert parallelism (the experts' momentum and
  // gradients over their own group).
  s.optimizer = OptimizerKind::OneBitAdam;
  EXPECT_FALSE(compatibility_refusal(s).has_value());
  s.optimizer = OptimizerKind::AdamW;
  s.compression = CompressionMethod::PowerSgd;
  EXPECT_FALSE(compatibility_refusal(s).has_value());

  EXPECT_FALSE(compatibility_refusal({}).has_value());
}
