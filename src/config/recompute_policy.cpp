#include "config/recompute_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "core/check.h"

namespace tessera::config {

namespace {
struct PolicyInfo {
  RecomputePolicy policy;
  std::string_view name;
};
constexpr std::array<PolicyInfo, 7> kPolicies{{
    {RecomputePolicy::None, "none"},
    {RecomputePolicy::Selective, "selective"},
    {RecomputePolicy::Full, "full"},
    {RecomputePolicy::EveryK, "every_k"},
    {RecomputePolicy::Optimal, "optimal"},
    {RecomputePolicy::Dtr, "dtr"},
    {RecomputePolicy::Checkmate, "checkmate"},
}};
}  // namespace

std::string_view recompute_policy_name(RecomputePolicy policy) {
  for (const auto& p : kPolicies)
    if (p.policy == policy) return p.name;
  TS_FAIL("unknown recompute policy {}", static_cast<int>(policy));
}

std::optional<RecomputePolicy> find_recompute_policy(std::string_view name) {
  for (const auto& p : kPolicies)
    if (p.name == name) return p.policy;
  return std::nullopt;
}

int default_every_k(int blocks) { return std::max(1, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(blocks))))); }

std::string recompute_policy_names() {
  std::string names;
  for (const auto& p : kPolicies) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  return names;
}

RecomputePolicy parse_recompute_policy(std::string_view name) {
  if (const std::optional<RecomputePolicy> policy = find_recompute_policy(name)) return *policy;
  TS_FAIL("unknown recompute policy '{}': choose one of {}", name, recompute_policy_names());
}

}  // namespace tessera::config
