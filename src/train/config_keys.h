#pragma once
// One declaration per key of the run config: its dotted name, the field it sets, its range, the
// optimizers that read it and its line of documentation. The reader (read_run_config), validate()'s
// range checks, the resolved config.toml (to_toml), the README's config reference and the fuzz
// dictionary (`tessera config-keys` prints both) all come from this table, so a key is added in
// one place. The model's keys are declared below the trainer, with the model (config/model_keys.h),
// whose reader and validate() the planner's model files share; their rows here come from those
// declarations. What one key cannot say alone (a check across keys) stays code in RunConfig::validate.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/key_range.h"
#include "config/model_keys.h"
#include "train/run_config.h"

namespace tessera::train {

// The values a key accepts and the bounds they are written with (config/key_range.h).
using config::kFinite;
using config::kSteps;
using config::kUnbounded;
using config::Range;

// The field a key sets, reached from the whole config.
template <class T>
using Accessor = T& (*)(RunConfig&);
// precision.loss_scale: a word ("dynamic") or a number, kept as text and written back as it came.
struct WordOrNumber {
  Accessor<std::string> text;
};
// A [model] key: declared with the model (config/model_keys.h), which reads it and holds it to its
// range; this table writes it, documents it and lists it for the fuzzer.
struct ModelKeyField {
  const config::ModelKey* key;
};
// A key whose value names a kind the config holds as an enum (optim.name, parallel.schedule, ...):
// read and written as its name; `set` refuses an unknown one, listing the known ones.
struct KindName {
  std::string_view (*name)(const RunConfig&);
  void (*set)(RunConfig&, std::string_view);
};
using Field = std::variant<Accessor<bool>, Accessor<int>, Accessor<int64_t>, Accessor<uint64_t>, Accessor<float>,
                           Accessor<double>, Accessor<std::string>, Accessor<std::vector<int64_t>>, WordOrNumber,
                           ModelKeyField, KindName>;

struct ConfigKey {
  std::string_view key;  // dotted: "train.steps"
  Field field;
  std::optional<Range> range = std::nullopt;
  // optim.* only: the optimizers that read the key; set away from its default under another
  // optimizer, it is refused. Empty: every optimizer reads it.
  std::vector<config::OptimizerKind> optimizers = {};
  // The README's default where the value alone would mislead ("from the data"); empty: the value.
  std::string_view default_text = {};
  std::string_view doc = {};

  std::string_view section() const { return key.substr(0, key.find('.')); }
  std::string_view name() const { return key.substr(key.find('.') + 1); }
};

// Every key, section by section in the order they are read, the README's order.
std::span<const ConfigKey> config_key_table();
// The sections, in the table's order.
std::vector<std::string_view> config_sections();
// The declaration of `dotted`; throws for a key the table does not have.
const ConfigKey& config_key(std::string_view dotted);
// The section the reader leaves to config::read_model_config, which the planner's model files share.
inline constexpr std::string_view kModelSection = "model";

// Sets every key of `section` (but model's) that `reader` holds.
void read_section(config::TableReader& reader, std::string_view section, RunConfig& config);
// Refuses a value of `key` outside its declared range; nothing for a key without one.
void check_declared_range(const RunConfig& config, const ConfigKey& key);
// Every key's value, defaults included: the resolved config that to_toml writes.
toml::table resolved_table(const RunConfig& config);
// Whether `key` holds its default in `config`.
bool holds_default(const RunConfig& config, const ConfigKey& key);
// The README's config reference: a Markdown table, one row per key.
std::string config_reference_markdown();
// The sections and keys as libFuzzer dictionary lines, the first part of tests/fuzz/fuzz_run_config.dict.
std::string config_fuzz_dictionary();

// The two halves of the table (config_keys_model_train.cpp, config_keys_run.cpp): what is trained
// and how (model, data, train, optim), and how the run executes (parallel to log).
std::vector<ConfigKey> model_and_training_keys();
std::vector<ConfigKey> execution_keys();

// The field of `section` at `member`, for the table's rows: in_train<&TrainSection::steps>.
template <auto section, auto member>
auto& field_of(RunConfig& config) {
  return config.*section.*member;
}
template <auto member>
inline constexpr auto in_model = &field_of<&RunConfig::model, member>;
template <auto member>
inline constexpr auto in_data = &field_of<&RunConfig::data, member>;
template <auto member>
inline constexpr auto in_train = &field_of<&RunConfig::train, member>;
template <auto member>
inline constexpr auto in_optim = &field_of<&RunConfig::optim, member>;
template <auto member>
inline constexpr auto in_parallel = &field_of<&RunConfig::parallel, member>;
template <auto member>
inline constexpr auto in_compression = &field_of<&RunConfig::compression, member>;
template <auto member>
inline constexpr auto in_precision = &field_of<&RunConfig::precision, member>;
template <auto member>
inline constexpr auto in_memory = &field_of<&RunConfig::memory, member>;
template <auto member>
inline constexpr auto in_checkpoint = &field_of<&RunConfig::checkpoint, member>;
template <auto member>
inline constexpr auto in_log = &field_of<&RunConfig::log, member>;

}  // namespace tessera::train
