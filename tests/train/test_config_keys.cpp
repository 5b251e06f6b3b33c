// The declarations of the run config's keys (train/config_keys.h): the README's config reference
// and the fuzz dictionary are printed from them, every key is written to the resolved config, and
// every declared range is the one validate() holds the key to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "optim/optimizer_config.h"
#include "train/config_keys.h"

using namespace tessera;
using namespace tessera::train;
namespace fs = std::filesystem;

namespace {

std::string source_file(const std::string& relative) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  EXPECT_NE(source, nullptr) << "TESSERA_SOURCE_DIR must point at the source tree (ctest sets it)";
  std::ifstream in(fs::path(source == nullptr ? "" : source) / relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string error_of(const RunConfig& config) {
  try {
    config.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Values just outside `range` that a field of type T holds: the bounds themselves where they are
// open, a step past them where they are closed (none past a bound of no limit).
template <class T>
std::vector<T> outside(const Range& range) {
  std::vector<T> values;
  const double step_down = std::is_integral_v<T> ? 1.0 : std::max(1.0, std::abs(range.low));
  const double step_up = std::is_integral_v<T> ? 1.0 : std::max(1.0, std::abs(range.high));
  for (const double v : {range.low_open ? range.low : range.low - step_down,
                         range.high_open ? range.high : range.high + step_up}) {
    const bool held = v >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
                      v <= static_cast<double>(std::numeric_limits<T>::max());
    if (held && v < kFinite) {
      values.push_back(static_cast<T>(v));
    }
  }
  return values;
}

}  // namespace

TEST(ConfigKeys, TheReadmeTableIsTheDeclarations) {
  const std::string readme = source_file("README.md");
  const size_t begin = readme.find("## Config reference");
  ASSERT_NE(begin, std::string::npos) << "README.md needs a '## Config reference' section";
  const std::string section = readme.substr(begin, readme.find("\n## ", begin + 1) - begin);
  EXPECT_NE(section.find(config_reference_markdown()), std::string::npos)
      << "README.md's config reference is not the table of src/train/config_keys_*.cpp; regenerate it with "
         "`tessera config-keys` and paste it over the table";
}

TEST(ConfigKeys, TheFuzzDictionaryBeginsWithTheKeys) {
  const std::string dictionary = source_file("tests/fuzz/fuzz_run_config.dict");
  EXPECT_NE(dictionary.find(config_fuzz_dictionary()), std::string::npos)
      << "tests/fuzz/fuzz_run_config.dict does not hold the config's keys; regenerate its first part with "
         "`tessera config-keys --fuzz-dictionary`";
}

TEST(ConfigKeys, EveryKeyIsDeclaredOnceAndWrittenToTheResolvedConfig) {
  std::set<std::string> declared;
  for (const ConfigKey& key : config_key_table()) {
    EXPECT_TRUE(declared.insert(std::string(key.key)).second) << key.key << " is declared twice";
    EXPECT_FALSE(key.doc.empty()) << key.key << " has no documentation";
  }
  std::set<std::string> written;
  const toml::table resolved = toml::parse(to_toml(RunConfig{}));
  for (const auto& [section, table] : resolved) {
    for (const auto& [key, value] : *table.as_table()) {
      written.insert(std::string(section.str()) + "." + std::string(key.str()));
    }
  }
  EXPECT_EQ(declared, written);
  const std::vector<std::string> keys = config_keys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()), written);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
}

// Each section's keys stand together, so that the reader reads a section once, the model first.
TEST(ConfigKeys, SectionsAreContiguous) {
  const std::vector<std::string_view> sections = config_sections();
  EXPECT_EQ(std::set<std::string_view>(sections.begin(), sections.end()).size(), sections.size());
  EXPECT_EQ(sections.front(), kModelSection);
}

TEST(ConfigKeys, OnlyOptimizerKeysNameTheirOptimizersEachOnce) {
  for (const ConfigKey& key : config_key_table()) {
    if (key.optimizers.empty()) continue;
    EXPECT_EQ(key.section(), "optim") << key.key;
    const std::set<optim::OptimizerKind> each(key.optimizers.begin(), key.optimizers.end());
    EXPECT_EQ(each.size(), key.optimizers.size()) << key.key;
  }
}

// The defaults are in range, and a value just outside a declared range is refused naming the key.
TEST(ConfigKeys, DeclaredRangesAreChecked) {
  EXPECT_EQ(error_of(RunConfig{}), "");
  int ranged = 0;
  for (const ConfigKey& key : config_key_table()) {
    if (!key.range) continue;
    ++ranged;
    std::visit(
        [&](auto field) {
          if constexpr (std::is_invocable_v<decltype(field), RunConfig&>) {
            using T = std::remove_reference_t<decltype(field(std::declval<RunConfig&>()))>;
            if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
              for (const T value : outside<T>(*key.range)) {
                RunConfig config;
                field(config) = value;
                const std::string error = error_of(config);
                EXPECT_NE(error.find(key.key), std::string::npos) << key.key << " = " << value << ": " << error;
              }
            }
          }
        },
        key.field);
  }
  EXPECT_GT(ranged, 40);
}
