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

std::optional<CompressionMethod> find_compression(std::string_view name) {
  for (const auto& [m, known] : kNames) {
    if (known == name) return m;
  }
  return std::nullopt;
}

CompressionMethod parse_compression(std::string_view name) {
  if (const std::optional<CompressionMethod> method = find_compression(name)) return *method;
  TS_FAIL("parallel.compression = '{}' is not known; use \"none\", \"topk\", \"qsgd\", \"onebit\" or \"powersgd\"", name);
}

}  // namespace tessera::config
