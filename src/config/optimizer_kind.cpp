#include "config/optimizer_kind.h"

#include <array>

#include <fmt/ranges.h>

#include "core/check.h"

namespace tessera::config {

namespace {

using K = OptimizerKind;

// The one table of kinds and names: parsing, messages and printing all read it.
constexpr std::array<K, 7> kKinds = {K::AdamW, K::Sgd, K::Adafactor, K::Adam8bit, K::Lamb, K::Lars, K::OneBitAdam};
constexpr std::array<std::string_view, 7> kNames = {"adamw", "sgd",  "adafactor",  "adam8bit",
                                                    "lamb",  "lars", "onebit_adam"};
static_assert(kKinds.size() == kNames.size());

}  // namespace

std::span<const OptimizerKind> optimizer_kinds() { return kKinds; }
std::span<const std::string_view> optimizer_names() { return kNames; }

std::string_view optimizer_name(OptimizerKind kind) {
  for (size_t i = 0; i < kKinds.size(); ++i) {
    if (kKinds[i] == kind) return kNames[i];
  }
  TS_FAIL("unknown optimizer kind {}", static_cast<int>(kind));
}

std::optional<OptimizerKind> find_optimizer_kind(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return kKinds[i];
  }
  return std::nullopt;
}

OptimizerKind parse_optimizer_kind(std::string_view name) {
  const std::optional<OptimizerKind> kind = find_optimizer_kind(name);
  TS_CHECK(kind.has_value(), "optimizer '{}' is not known; use one of {}", name, fmt::join(kNames, ", "));
  return *kind;
}

}  // namespace tessera::config
