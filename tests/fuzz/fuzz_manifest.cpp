// Fuzz target: checkpoint manifest text -> train::parse_checkpoint_manifest. A tessera::Error is
// the right answer to bad input; anything else is a finding. A random edit almost never keeps a
// version-2 manifest's self-checksum valid, so each input is also tried re-signed: the checks
// behind the checksum get fuzzed too.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/json_input.h"
#include "train/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    train::parse_checkpoint_manifest(text, "fuzz/step_00000003/manifest.json", train::step_of_folder_name("step_00000003"));
  } catch (const Error&) {
  }
  nlohmann::json j;
  try {
    j = parse_json_bounded(text, "fuzz input");
  } catch (const Error&) {
    return 0;
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  if (!j.is_object()) return 0;
  j.erase("manifest_xxh3");
  try {
    train::parse_checkpoint_manifest(train::checkpoint_manifest_text(j), "fuzz/manifest.json", std::nullopt);
  } catch (const Error&) {
  }
  return 0;
}
