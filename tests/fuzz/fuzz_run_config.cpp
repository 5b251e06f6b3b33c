// Fuzz target: TOML text -> the run config (config::parse_toml_text, train::read_run_config).
// A tessera::Error is the right answer to bad input; anything else is a finding. A config that
// reads must also survive its own round trip: the resolved text saved with every run and
// checkpoint (to_toml) reads back as the same config.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "config/model_config.h"
#include "core/check.h"
#include "train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string resolved;
  try {
    resolved = train::to_toml(train::read_run_config(config::parse_toml_text(text, "fuzz.toml")));
  } catch (const Error&) {
    return 0;
  }
  try {
    const std::string again = train::to_toml(train::read_run_config(config::parse_toml_text(resolved, "resolved.toml")));
    if (again != resolved) {
      std::fprintf(stderr, "the resolved config does not read back as itself:\n%s\n---\n%s\n", resolved.c_str(),
                   again.c_str());
      std::abort();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "the resolved config is refused when read back: %s\n%s\n", e.what(), resolved.c_str());
    std::abort();
  }
  return 0;
}
