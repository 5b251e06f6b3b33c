#include "memory/recompute_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string>

#include "core/check.h"
#include "memory/dtr.h"
#include "memory/optimal.h"

namespace tessera::memory {

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

RecomputePolicy parse_recompute_policy(std::string_view name) {
  if (const std::optional<RecomputePolicy> policy = find_recompute_policy(name)) return *policy;
  std::string names;
  for (const auto& p : kPolicies) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  TS_FAIL("unknown recompute policy '{}': choose one of {}", name, names);
}

ChainSchedule none_schedule(int units) {
  TS_CHECK(units >= 1, "a recompute schedule needs at least one unit (the loss unit), got {}", units);
  ChainSchedule s;
  for (int i = 0; i < units; ++i) s.forward.push_back(ChainOp::forward(i, Keep::All));
  for (int i = units - 1; i >= 0; --i) s.backward.push_back(ChainOp::backward(i));
  return s;
}

ChainSchedule every_k_schedule(int units, int k) {
  TS_CHECK(units >= 1, "a recompute schedule needs at least one unit (the loss unit), got {}", units);
  TS_CHECK(k >= 1, "every_k recomputation needs segments of k >= 1 units, got k = {}", k);
  const int n = units;
  const int body = n - 1;  // the loss unit's backward follows its forward at once: nothing to save there
  ChainSchedule s;
  for (int i = 0; i < body; ++i) s.forward.push_back(ChainOp::forward(i, i % k == 0 ? Keep::Input : Keep::Nothing));
  s.forward.push_back(ChainOp::forward(n - 1, Keep::All));
  s.backward.push_back(ChainOp::backward(n - 1));
  for (int first = ((body - 1) / k) * k; first >= 0 && body > 0; first -= k) {
    const int end = std::min(first + k, body);
    for (int i = first; i < end; ++i) s.backward.push_back(ChainOp::forward(i, Keep::All));
    for (int i = end - 1; i >= first; --i) s.backward.push_back(ChainOp::backward(i));
  }
  return s;
}

ChainSchedule full_schedule(int units) { return every_k_schedule(units, 1); }

ChainSchedule plan_recompute(RecomputePolicy policy, std::span<const ChainUnit> units, int every_k,
                             int64_t budget_bytes) {
  check_chain(units);
  const int n = static_cast<int>(units.size());
  switch (policy) {
    case RecomputePolicy::None:
    case RecomputePolicy::Selective: return none_schedule(n);
    case RecomputePolicy::Full: return full_schedule(n);
    case RecomputePolicy::EveryK: return every_k_schedule(n, every_k);
    case RecomputePolicy::Optimal: return optimal_schedule(units, budget_bytes);
    case RecomputePolicy::Dtr: return dtr_schedule(units, budget_bytes);
    case RecomputePolicy::Checkmate:
      // Its solver lives in memory/remat (COIN-OR CBC), which this library does not link.
      TS_FAIL("memory.recompute = \"checkmate\" is planned by remat::checkmate_chain_schedule, not here");
  }
  TS_FAIL("unknown recompute policy {}", static_cast<int>(policy));
}

}  // namespace tessera::memory
