#include "train/config_keys.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "core/overloaded.h"

namespace tessera::train {

namespace {

const RunConfig& defaults() {
  static const RunConfig config;
  return config;
}

// The accessors only name a field; reading through one leaves the config as it was.
template <class T>
const T& value_of(const RunConfig& config, Accessor<T> field) {
  return field(const_cast<RunConfig&>(config));
}

// A number when the whole text is one, else the word.
std::optional<double> number_in(const std::string& text) {
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// "1e-05" as the README writes it, "1e-5"; a float in its own shortest digits, not a double's.
template <class T>
std::string number_text(T value) {
  std::string text = fmt::format("{}", value);
  if (const size_t e = text.find("e-0"); e != std::string::npos) text.erase(e + 2, 1);
  return text;
}

std::string default_text(const ConfigKey& key) {
  if (!key.default_text.empty()) return std::string(key.default_text);
  const auto quoted = [](std::string_view text) { return fmt::format("`\"{}\"`", text); };
  return std::visit(
      Overloaded{
          [&](Accessor<bool> f) { return std::string(value_of(defaults(), f) ? "true" : "false"); },
          [&](Accessor<float> f) { return number_text(value_of(defaults(), f)); },
          [&](Accessor<double> f) { return number_text(value_of(defaults(), f)); },
          [&](Accessor<std::string> f) { return quoted(value_of(defaults(), f)); },
          [&](Accessor<std::vector<int64_t>> f) {
            return fmt::format("`[{}]`", fmt::join(value_of(defaults(), f), ", "));
          },
          [&](WordOrNumber f) { return quoted(value_of(defaults(), f.text)); },
          [&](ModelKeyField f) {
            return std::visit(Overloaded{
                                  [&](int64_t v) { return fmt::format("{}", v); },
                                  [&](double v) { return number_text(v); },
                                  [&](bool v) { return std::string(v ? "true" : "false"); },
                                  [&](const std::string& v) { return quoted(v); },
                              },
                              config::model_key_value(*f.key, defaults().model));
          },
          [&](KindName f) { return quoted(f.name(defaults())); },
          [&](auto integer) { return fmt::format("{}", value_of(defaults(), integer)); },
      },
      key.field);
}

}  // namespace

std::span<const ConfigKey> config_key_table() {
  static const std::vector<ConfigKey> table = [] {
    std::vector<ConfigKey> keys = model_and_training_keys();
    std::vector<ConfigKey> rest = execution_keys();
    keys.insert(keys.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
    return keys;
  }();
  return table;
}

std::vector<std::string_view> config_sections() {
  std::vector<std::string_view> sections;
  for (const ConfigKey& key : config_key_table()) {
    if (sections.empty() || sections.back() != key.section()) sections.push_back(key.section());
  }
  return sections;
}

const ConfigKey& config_key(std::string_view dotted) {
  const std::span<const ConfigKey> table = config_key_table();
  const auto it = std::find_if(table.begin(), table.end(), [&](const ConfigKey& k) { return k.key == dotted; });
  TS_CHECK(it != table.end(), "config: no key '{}' is declared", dotted);
  return *it;
}

void read_section(config::TableReader& reader, std::string_view section, RunConfig& config) {
  for (const ConfigKey& key : config_key_table()) {
    if (key.section() != section) continue;
    const std::string name(key.name());
    std::visit(Overloaded{
                   [&](Accessor<uint64_t> f) {
                     // TOML's integers are signed: a seed above 2^63 is written, and read, as its bits.
                     uint64_t& seed = f(config);
                     seed = static_cast<uint64_t>(reader.get<int64_t>(name, static_cast<int64_t>(seed)));
                   },
                   [&](WordOrNumber f) {
                     std::string& text = f.text(config);
                     if (reader.holds_string(name)) {
                       text = reader.get(name, text);
                     } else if (reader.has(name)) {
                       text = fmt::format("{}", reader.get(name, 0.0));
                     }
                   },
                   [&](ModelKeyField) { TS_FAIL("config: {} is read with the model, not in [{}]", key.key, section); },
                   [&](KindName f) { f.set(config, reader.get(name, std::string(f.name(config)))); },
                   [&](auto f) {
                     auto& value = f(config);
                     value = reader.get(name, value);
                   },
               },
               key.field);
  }
}

void check_declared_range(const RunConfig& config, const ConfigKey& key) {
  if (!key.range) return;
  std::visit(Overloaded{
                 [&](Accessor<bool>) {},
                 [&](Accessor<std::string>) {},
                 [&](Accessor<std::vector<int64_t>>) {},
                 [&](WordOrNumber) {},
                 [&](ModelKeyField) {},  // ModelConfig::validate holds them to their declarations
                 [&](KindName) {},
                 [&](auto number) { config::check_in_range(key.key, value_of(config, number), *key.range); },
             },
             key.field);
}

toml::table resolved_table(const RunConfig& config) {
  toml::table root;
  for (const ConfigKey& key : config_key_table()) {
    toml::table& section = *root.insert(key.section(), toml::table{}).first->second.as_table();
    const std::string_view name = key.name();
    std::visit(Overloaded{
                   [&](Accessor<uint64_t> f) { section.insert(name, static_cast<int64_t>(value_of(config, f))); },
                   [&](Accessor<float> f) { section.insert(name, config::shortest_decimal(value_of(config, f))); },
                   [&](Accessor<std::vector<int64_t>> f) {
                     toml::array values;
                     for (int64_t v : value_of(config, f)) values.push_back(v);
                     section.insert(name, values);
                   },
                   [&](WordOrNumber f) {
                     const std::string& text = value_of(config, f.text);
                     if (const std::optional<double> number = number_in(text)) {
                       section.insert(name, *number);
                     } else {
                       section.insert(name, text);
                     }
                   },
                   [&](ModelKeyField f) {
                     std::visit([&](const auto& value) { section.insert(name, value); },
                                config::model_key_value(*f.key, config.model));
                   },
                   [&](KindName f) { section.insert(name, std::string(f.name(config))); },
                   [&](auto f) { section.insert(name, value_of(config, f)); },
               },
               key.field);
  }
  return root;
}

bool holds_default(const RunConfig& config, const ConfigKey& key) {
  return std::visit(Overloaded{
                        [&](WordOrNumber f) { return value_of(config, f.text) == value_of(defaults(), f.text); },
                        [&](ModelKeyField f) {
                          return config::model_key_value(*f.key, config.model) ==
                                 config::model_key_value(*f.key, defaults().model);
                        },
                        [&](KindName f) { return f.name(config) == f.name(defaults()); },
                        [&](auto f) { return value_of(config, f) == value_of(defaults(), f); },
                    },
                    key.field);
}

std::string config_reference_markdown() {
  std::string out = "| key | default | meaning |\n|---|---|---|\n";
  for (const ConfigKey& key : config_key_table()) {
    out += fmt::format("| `{}` | {} | {} |\n", key.key, default_text(key), key.doc);
  }
  return out;
}

std::string config_fuzz_dictionary() {
  std::string out =
      "# The sections and keys of the run config (`tessera config-keys --fuzz-dictionary` prints this part).\n";
  std::set<std::string_view> sections, names;
  for (const ConfigKey& key : config_key_table()) {
    if (sections.insert(key.section()).second) out += fmt::format("\"[{}]\"\n", key.section());
  }
  // A name two sections share (every, warmup_steps) once.
  for (const ConfigKey& key : config_key_table()) {
    if (names.insert(key.name()).second) out += fmt::format("\"{}\"\n", key.name());
  }
  return out;
}

}  // namespace tessera::train
