#pragma once
// One declaration per key of the [model] section: its dotted name, the field it sets, its range,
// when the model reads it, and its line of documentation. read_model_config reads the section from
// these, ModelConfig::validate holds each key to its range, and the run config's key table
// (train/config_keys.h) takes its model rows from them for the README's config reference, the fuzz
// dictionary and the resolved config.toml. They live with the model, below the trainer, so that the
// planner's model files are read by the same declarations. What one key cannot say alone (a check
// across keys) stays code in ModelConfig::validate.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "config/key_range.h"
#include "config/model_config.h"

namespace tessera::config {

// A key whose value is a word the model holds as an enum (arch, activation): set from its name when
// given, refusing an unknown one with the known ones; written by `name` (activation resolved: the
// architecture's when unset).
struct ModelWord {
  std::string (*name)(const ModelConfig&);
  void (*set)(ModelConfig&, const std::string&);
};
using ModelField = std::variant<int ModelConfig::*, float ModelConfig::*, bool ModelConfig::*, ModelWord>;

struct ModelKey {
  std::string_view key;  // dotted: "model.n_layer"
  ModelField field;
  std::optional<Range> range = std::nullopt;
  // Whether the model reads the key; one it does not read is not held to its range (the MoE keys
  // of a dense model). Null: always.
  bool (*read_by)(const ModelConfig&) = nullptr;
  // The README's default where the value alone would mislead ("from the data"); empty: the value.
  std::string_view default_text = {};
  std::string_view doc = {};

  std::string_view name() const { return key.substr(key.find('.') + 1); }
};

// Every [model] key, in the order it is read (arch first: it sets what bias defaults to).
std::span<const ModelKey> model_keys();

// A key's value in `m` as the resolved config writes it: integers, floats in their shortest digits
// (0.001, not 0.0010000000474974513), booleans and words.
using ModelValue = std::variant<int64_t, double, bool, std::string>;
ModelValue model_key_value(const ModelKey& key, const ModelConfig& m);

}  // namespace tessera::config
