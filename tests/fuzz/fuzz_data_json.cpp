// Fuzz target: data.json text -> data::parse_dataset_info with every check of what it claims. A
// tessera::Error is the right answer to bad input; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  try {
    data::parse_dataset_info(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/data.json");
  } catch (const Error&) {
  }
  return 0;
}
