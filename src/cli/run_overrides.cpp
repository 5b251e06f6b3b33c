#include "cli/run_overrides.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"

namespace tessera::cli {

std::vector<std::pair<std::string, std::string>> parse_overrides(const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    TS_CHECK(a.starts_with("--") && a.size() > 2,
             "unexpected argument '{}': overrides look like --section.key value (e.g. --train.steps 100)", a);
    std::string key = a.substr(2);
    const size_t eq = key.find('=');
    if (eq != std::string::npos) {
      out.emplace_back(key.substr(0, eq), key.substr(eq + 1));
      continue;
    }
    TS_CHECK(key.find('.') != std::string::npos,
             "unknown option '{}': config overrides name a section and a key, like --train.steps 100", a);
    TS_CHECK(i + 1 < args.size() && !args[i + 1].starts_with("--"), "override '{}' has no value", a);
    // Several words up to the next option are an array: `--parallel.stage_layers 1 3` is [1, 3]
    // (and the form a launcher's argument parser makes of '[1,3]').
    std::vector<std::string> values;
    while (i + 1 < args.size() && !args[i + 1].starts_with("--")) values.push_back(args[++i]);
    out.emplace_back(key, values.size() == 1 ? values.front() : fmt::format("[{}]", fmt::join(values, ", ")));
  }
  return out;
}

}  // namespace tessera::cli
