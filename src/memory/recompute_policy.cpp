#include "memory/recompute_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string>

#include "core/check.h"
#include "memory/dtr.h"
#include "memory/optimal.h"

namespace tessera::memory {

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

ChainSchedule plan_recompute(config::RecomputePolicy policy, std::span<const ChainUnit> units, int every_k,
                             int64_t budget_bytes) {
  check_chain(units);
  const int n = static_cast<int>(units.size());
  switch (policy) {
    case config::RecomputePolicy::None:
    case config::RecomputePolicy::Selective: return none_schedule(n);
    case config::RecomputePolicy::Full: return full_schedule(n);
    case config::RecomputePolicy::EveryK: return every_k_schedule(n, every_k);
    case config::RecomputePolicy::Optimal: return optimal_schedule(units, budget_bytes);
    case config::RecomputePolicy::Dtr: return dtr_schedule(units, budget_bytes);
    case config::RecomputePolicy::Checkmate:
      // Its solver lives in memory/remat (COIN-OR CBC), which this library does not link.
      TS_FAIL("memory.recompute = \"checkmate\" is planned by remat::checkmate_chain_schedule, not here");
  }
  TS_FAIL("unknown recompute policy {}", static_cast<int>(policy));
}

}  // namespace tessera::memory
