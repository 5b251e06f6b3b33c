#include "cli/run_overrides.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "cli/errors.h"
#include "config/toml_reader.h"
#include "train/run_config.h"

namespace tessera::cli {

namespace {

// The option a mistyped `word` ("--lr", "--confg", "--optim.lrr") most likely meant: a config key
// ending in it, the closest of the command's own options, the closest key; or "".
std::string suggestion(const std::string& word, const std::vector<std::string>& options) {
  const std::vector<std::string> keys = train::config_keys();
  const std::string bare = word.substr(2);
  if (bare.find('.') != std::string::npos) {
    const std::string hint = config::closest_match(bare, keys);
    return hint.empty() ? "" : "--" + hint;
  }
  std::vector<std::string> last_parts;
  for (const std::string& k : keys) {
    const std::string last = k.substr(k.find('.') + 1);
    if (last == bare) return "--" + k;
    last_parts.push_back(last);
  }
  if (std::string hint = config::closest_match(word, options); !hint.empty()) return hint;
  const std::string hint = config::closest_match(bare, last_parts);
  if (hint.empty()) return "";
  for (const std::string& k : keys) {
    if (k.substr(k.find('.') + 1) == hint) return "--" + k;
  }
  return "";
}

[[noreturn]] void unknown_option(const std::string& word, const std::vector<std::string>& options) {
  const std::string hint = suggestion(word, options);
  throw UsageError(fmt::format("unknown option '{}'{} (config keys are options too, as --section.key value: "
                               "--train.steps 100; README.md lists them)",
                               word, hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint)));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> parse_overrides(const std::vector<std::string>& args,
                                                                 const std::vector<std::string>& options) {
  const std::vector<std::string> keys = train::config_keys();
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!a.starts_with("--") || a.size() <= 2) {
      throw UsageError(fmt::format("unexpected argument '{}': overrides look like --section.key value (e.g. "
                                   "--train.steps 100)", a));
    }
    std::string key = a.substr(2);
    const size_t eq = key.find('=');
    const std::string name = key.substr(0, eq);
    if (std::find(keys.begin(), keys.end(), name) == keys.end()) unknown_option("--" + name, options);
    if (eq != std::string::npos) {
      out.emplace_back(name, key.substr(eq + 1));
      continue;
    }
    if (i + 1 >= args.size() || args[i + 1].starts_with("--")) {
      throw UsageError(fmt::format("override '{}' has no value: give it as {} VALUE", a, a));
    }
    // Several words up to the next option are an array: `--parallel.stage_layers 1 3` is [1, 3]
    // (and the form a launcher's argument parser makes of '[1,3]').
    std::vector<std::string> values;
    while (i + 1 < args.size() && !args[i + 1].starts_with("--")) values.push_back(args[++i]);
    out.emplace_back(key, values.size() == 1 ? values.front() : fmt::format("[{}]", fmt::join(values, ", ")));
  }
  return out;
}

std::vector<std::string> option_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* o : command.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

}  // namespace tessera::cli
