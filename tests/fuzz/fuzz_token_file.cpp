// Fuzz target: bytes -> data::TokenFile (the header check against the size), then every token
// read back, with and without a vocabulary to check them against. A tessera::Error is the right
// answer to a bad file; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  for (const int64_t vocab : {int64_t{0}, int64_t{320}, int64_t{70000}}) {
    try {
      const auto file = data::TokenFile::from_bytes(bytes, "fuzz.bin", vocab);
      std::vector<int32_t> tokens(static_cast<size_t>(file->size()));
      file->read(0, tokens);
      if (file->size() > 0) file->at(file->size() - 1);
    } catch (const Error&) {
    }
  }
  return 0;
}
