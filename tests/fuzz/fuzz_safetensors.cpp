// Fuzz target: bytes -> io::SafeTensorsFile (the header parse and every check behind it), then
// every tensor read the ways a checkpoint loader reads them. A tessera::Error is the right answer
// to a bad file; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  try {
    const io::SafeTensorsFile file = io::SafeTensorsFile::from_bytes(std::vector<char>(data, data + size), "fuzz.safetensors");
    MemoryAccountant memory;
    for (const std::string& name : file.names()) {
      const io::SafeTensorEntry& entry = file.entry(name);
      Tensor copy = Tensor::empty(entry.shape, entry.dtype, MemoryTag::Workspace, memory);
      file.copy_to(name, copy);
      try {
        file.view(name, entry.dtype);
      } catch (const Error&) {
        // Unaligned data: copy_to is the way, and it worked.
      }
    }
    for (const auto& [key, value] : file.metadata()) file.metadata_value(key);
  } catch (const Error&) {
  }
  return 0;
}
