// Fuzz target: timeline.json text -> pipeline::parse_measured_timeline, which regenerates the
// schedule the file names and checks every record against it. A tessera::Error is the right
// answer to bad input; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "schedule/measured_timeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  try {
    pipeline::parse_measured_timeline(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/timeline.json");
  } catch (const Error&) {
  }
  return 0;
}
