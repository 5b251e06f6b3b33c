#include "train/config_changes.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <map>
#include <sstream>
#include <string_view>

#include "config/model_config.h"

namespace tessera::train {

namespace {

// Settings of this process alone, not of the run it continues.
constexpr std::array<std::string_view, 6> kProcessKeys = {"checkpoint.resume", "checkpoint.at_end",
                                                          "train.exit_after",  "train.max_minutes",
                                                          "train.overwrite",   "train.allow_changes"};

bool changes_optimization(const std::string& key) {
  return key.starts_with("optim.") || key.starts_with("compression.") || key == "parallel.compression" ||
         key == "train.steps" || key == "train.batch_size";
}

// A value as a person writes it: floats by their shortest form (the resolved TOML keeps 17 digits).
std::string shown(const toml::node& node) {
  if (const auto* f = node.as_floating_point()) return fmt::format("{}", static_cast<float>(f->get()));
  if (const auto* s = node.as_string()) return fmt::format("\"{}\"", s->get());
  if (const auto* i = node.as_integer()) return fmt::format("{}", i->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  std::ostringstream out;
  if (const auto* a = node.as_array()) {
    out << *a;
  } else if (const auto* t = node.as_table()) {
    out << *t;
  }
  return out.str();
}

std::map<std::string, std::string> flatten(const std::string& text, const std::string& what) {
  const toml::table table = config::parse_toml_text(text, what);
  std::map<std::string, std::string> values;
  for (const auto& [section, node] : table) {
    const toml::table* keys = node.as_table();
    if (keys == nullptr) continue;
    for (const auto& [key, value] : *keys) values[std::string(section.str()) + "." + std::string(key.str())] = shown(value);
  }
  return values;
}

}  // namespace

std::vector<ConfigChange> config_changes(const std::string& saved_toml, const std::string& now_toml) {
  std::map<std::string, std::string> saved = flatten(saved_toml, "the checkpoint's config");
  // Configs saved before model.activation existed trained their architecture's MLP: not a change.
  if (!saved.contains("model.activation")) {
    const auto arch = saved.find("model.arch");
    const bool llama = arch != saved.end() && arch->second == "\"llama\"";
    saved["model.activation"] = fmt::format(
        "\"{}\"", config::activation_name(config::default_activation(llama ? config::Architecture::Llama
                                                                          : config::Architecture::Gpt2)));
  }
  const std::map<std::string, std::string> now = flatten(now_toml, "this run's config");
  std::vector<ConfigChange> changes;
  const auto add = [&](const std::string& key) {
    if (std::find(kProcessKeys.begin(), kProcessKeys.end(), key) != kProcessKeys.end()) return;
    const auto s = saved.find(key);
    const auto n = now.find(key);
    const std::string before = s == saved.end() ? "(not set)" : s->second;
    const std::string after = n == now.end() ? "(not set)" : n->second;
    if (before != after) changes.push_back({key, before, after, changes_optimization(key)});
  };
  for (const auto& [key, value] : now) add(key);
  for (const auto& [key, value] : saved) {
    if (!now.contains(key)) add(key);
  }
  std::sort(changes.begin(), changes.end(), [](const ConfigChange& a, const ConfigChange& b) { return a.key < b.key; });
  return changes;
}

std::string describe_changes(const std::vector<ConfigChange>& changes) {
  std::string text;
  for (const ConfigChange& c : changes) {
    text += fmt::format("{}{} {} -> {}", text.empty() ? "" : ", ", c.key, c.saved, c.now);
  }
  return text;
}

}  // namespace tessera::train
