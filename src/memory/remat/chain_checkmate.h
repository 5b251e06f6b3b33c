#pragma once
// Checkmate over the chain of units the training interpreter runs (memory/chain.h): the graph of a chain, the
// rules that keep the MILP's schedules within what the interpreter can execute, and the translation of a
// solved schedule back into a ChainSchedule, which runs bitwise like every other recompute policy.
//
// Why a chain's graph needs rules of its own. Checkmate's schedules are finer than a chain's: it could
// regenerate a unit's output from kept activations without rerunning the unit, hold a unit's activations
// without its input, or drop a unit's output while the unit below still needs its gradient. The interpreter
// runs whole unit forwards whose keep choice (all, input, nothing) decides what survives, so the program gets
// the constraints below, and every schedule it returns is translated and simulated again by chain.h's rules,
// the contract the interpreter's measured peak is held to.
//
// The graph of units 0..n-1, node order:
//   x_0, [e_0], a_0, [r_0], x_1, [e_1], a_1, [r_1], x_2, ..., a_{n-1}, [r_{n-1}], [h_{n-1}], g_{n-1}, ..., [h_0], g_0
// x_0 is the caller's input (pinned: never recomputed); a_i unit i's kept activations (own_bytes, its forward
// time, reads x_i) less r_i, its rebuildable part when it has one (rebuildable_bytes, cost rebuild_time taken
// off a_i's, reads x_i and a_i: what a selective keep drops and its backward rebuilds); x_{i+1} its output
// (output_bytes, cost 0, reads a_i, r_i, x_i); e_i, present when the unit's
// forward holds forward_extra_bytes while it runs, a cost-0 node read by a_i and x_{i+1}; h_i, present when
// its backward allocates backward_extra_bytes, a cost-0 node read by g_i; g_i unit i's backward (cost
// backward_time, 0 bytes: gradients are the same for every schedule), reading a_i, r_i, x_i and g_{i+1}. So the
// moments chain.h counts a peak at — a forward holding its input, activations, output and extra bytes, a
// backward holding its activations, input and extra bytes — are the moments Checkmate counts. Two differ and
// chain.h judges the result: a selective forward is counted holding its whole rebuildable part (chain.h: the
// smaller selective_forward_extra_bytes), and a rebuild holding rebuildable_bytes (chain.h: rebuild_bytes,
// more under sequence parallelism).
//
// The rebuildable part is what makes this graph finer than Rotor's chain: Checkmate chooses per unit between
// keeping it and rebuilding it in the backward (Keep::Selective), beside keeping the unit's input only or
// nothing; Rotor's dynamic program (memory/optimal.h) chooses among the last three and All.
//
// The constraints (stage t, the stage of node v written [v]):
//  - x_0 is never recomputed.
//  - No recomputation before the first backward stage but of the cost-0 e nodes: the forward phase runs
//    each unit once.
//  - After the forward phase a unit's output is computed exactly when its activations are, since a unit
//    forward always produces both: R[t][x_{i+1}] = R[t][a_i] for t > [x_{i+1}].
//  - Activations are kept only with their input (Keep::All keeps x_i): S[t][a_i] <= S[t][x_i].
//  - Once kept past the stage of its output, a unit's activations stay until its backward (chain.h drops
//    them only there): S[t+1][a_i] >= S[t][a_i] for [x_{i+1}] < t < [first backward node of unit i].
//  - A unit forward makes r_i with a_i (R[t][r_i] >= R[t][a_i] after the forward phase); r_i alone runs only in
//    the stages of unit i's backward (h_i's and g_i's: the rebuild), R[t][r_i] = R[t][a_i] elsewhere; r_i is
//    kept only with a_i, and once kept past the forward, until the backward, as a_i is.
//  - A unit's input, once resident, stays until unit i's forward or backward consumes it (chain.h keeps a
//    unit's output until then): S[t+1][x_i] >= R[t][x_i] + S[t][x_i] - R[t][a_i] - R[t][x_{i+1}] for
//    [x_i] <= t < [first backward node of unit i].
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "memory/chain.h"
#include "memory/remat/milp.h"

namespace tessera::memory::remat {

struct ChainGraph {
  Graph graph;
  // Node indices per unit; -1 where the unit has none (x has no entry n; e and h exist only for extra bytes, r
  // only for a rebuildable part).
  std::vector<int> input, forward_extra, activations, rebuildable, backward_extra, backward;
  // The first node of unit i's backward (h_i when it exists, else g_i): where its recomputations run.
  int backward_start(int unit) const;
};

// The graph above, x_0's cost 0 (the constraints pin it).
ChainGraph chain_training_graph(std::span<const ChainUnit> units);

// The constraints above for this graph.
std::vector<ScheduleConstraint> chain_constraints(const ChainGraph& chain);

// A chain schedule as a Checkmate schedule on the chain's graph, keeping what chain.h keeps, stage by stage
// (a selective keep drops r_i, and the backward rebuilds it): it meets chain_constraints, costs the same time,
// and peaks no higher when no forward keeps selectively (see above for what a selective forward counts). CBC starts from Rotor's schedule mapped
// this way, so at a budget Rotor meets it has a schedule from the start.
Schedule checkmate_schedule(const ChainGraph& chain, std::span<const ChainUnit> units, const ChainSchedule& schedule);

// A Checkmate schedule on the chain's graph as a chain schedule: the unit forwards and backwards it runs, in
// its order, each forward keeping what the schedule holds after it (a_i without r_i: Keep::Selective). Empty when the schedule is not one a chain
// can run (its forward phase recomputes, or runs the units out of order); chain.h's simulate judges the rest.
std::optional<ChainSchedule> chain_schedule(const ChainGraph& chain, const Schedule& schedule);

// The graph of a chain with no extra bytes and x_0 at input_cost, without the constraints: the plain
// Checkmate program on a chain (the tests and bench/remat_solve compare it with Rotor). Refuses extra bytes.
Graph chain_graph(std::span<const ChainUnit> units, double input_cost);

enum class ChainPlanSource : std::uint8_t {
  Solved,    // CBC (or its rounding) within the time limit
  Cached,    // read from the solver cache
  Fallback,  // the solver found no schedule the chain can run in time: Rotor's optimal schedule instead
};
const char* chain_plan_source_name(ChainPlanSource source);  // "solved", "cached", "fallback to optimal"

struct ChainCheckmate {
  bool found = false;  // a schedule within the budget; otherwise least_budget says what would work
  ChainSchedule schedule;
  ChainPlanSource source = ChainPlanSource::Solved;
  SolveStatus status = SolveStatus::NoSchedule;  // the solver's, also for a cached or fallen-back plan
  double solve_seconds = 0;                      // this call's solver time (0 when cached)
  std::string cache_file;                        // where the solution was read or written; empty without a cache
  std::string cache_note;                        // why a cache file that exists could not be used, if it could not
  // Without a schedule: the least budget that works, Rotor's least (which the fallback meets). The schedules a
  // chain can run are Rotor's and a few non-persistent ones, so a budget below Rotor's least rarely has one.
  int64_t least_budget = 0;
};

struct ChainCheckmateOptions {
  double time_limit_s = 60;
  // Where solutions are kept, one file per graph and budget (created when missing); empty: no cache.
  std::filesystem::path cache_dir{};
};

// Checkmate's schedule of the chain within budget_bytes (x_0 included, as chain.h's peak): from the cache when
// it holds this graph and budget, else solved (starting from Rotor's schedule when Rotor meets the budget) and
// cached. A solver schedule whose translation peaks over the budget is solved again with the bound lowered by
// the excess. When no schedule the chain can run comes out, Rotor's optimal schedule stands in (source
// Fallback) if the budget is one Rotor meets; otherwise nothing is found and least_budget says what would be.
ChainCheckmate checkmate_chain_schedule(std::span<const ChainUnit> units, int64_t budget_bytes,
                                        const ChainCheckmateOptions& options);

}  // namespace tessera::memory::remat
