#pragma once
// The reference the MILP (milp.h) is checked against: an exhaustive search over the same frontier-advancing
// schedules and memory model (graph.h), written from the rules with bit masks and sharing no code with the
// simulator or the MILP.
//
// Why it is exhaustive. prune_schedule (graph.h) turns any schedule into one that is the minimal R of its own
// S and no worse in cost or peak, so searching every S with its minimal R finds every (cost, peak) a schedule
// can reach or beat. What stage t costs and peaks at depends only on (S[t], S[t+1]), so the search is a walk
// over layers of states S[t] ⊆ {0..t-1}, each layer every subset: S[t+1] may be any subset of {0..t} (stage t
// computes what it must keep). Each state carries the Pareto front of (highest stage peak so far, cost so
// far); the front at the end answers every budget at once. About 4^n stage evaluations: 12 nodes take well
// under a second.
#include <cstdint>
#include <optional>
#include <vector>

#include "memory/remat/graph.h"

namespace tessera::memory::remat {

struct ParetoPoint {
  int64_t peak_bytes = 0;
  double cost = 0;
};

// Every (peak, cost) no schedule beats in both, by rising peak and falling cost. The first point's peak is
// the smallest budget any schedule meets. Refuses graphs of more than 14 nodes.
std::vector<ParetoPoint> exhaustive_frontier(const Graph& graph);

// A cheapest schedule with peak at most budget_bytes (the same walk, one budget, with the states'
// predecessors kept), or nullopt if none fits. It lets the tests hold the search to the simulator.
std::optional<Schedule> exhaustive_schedule(const Graph& graph, int64_t budget_bytes);

// The least cost of a schedule with peak at most budget_bytes on that front; nullopt if none.
std::optional<double> cheapest_within(const std::vector<ParetoPoint>& frontier, int64_t budget_bytes);

}  // namespace tessera::memory::remat
