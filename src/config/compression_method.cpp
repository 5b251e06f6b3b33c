#include "config/compression_method.h"

#include <utility>

#include "core/check.h"

namespace tessera::config {

namespace {
constexpr std::pair<CompressionMethod, std::string_view> kNames[] = {
    {CompressionMethod::None, "none"},     {CompressionMethod::TopK, "topk"},
    {CompressionMethod::Qsgd, "qsgd"},     {CompressionMethod::OneBit, "onebit"},
    {CompressionMethod::PowerSgd, "powersgd"},
};
}  // namespace

std::string_view compression_name(CompressionMethod method) {
  for (const auto& [m, name] : kNames) {
    if (m == method) return name;
  }
  TS_FAIL("unknown compression method {}", static_cast<int>(method));
}

CompressionMethod parse_compression(std::string_view name) {
  for (const auto& [m, known] : kNames) {
    if (known == name) return m;
  }
  TS_FAIL("parallel.compression = '{}' is not known; use \"none\", \"topk\", \"qsgd\", \"onebit\" or \"powersgd\"", name);
}

}  // namespace tessera::config
