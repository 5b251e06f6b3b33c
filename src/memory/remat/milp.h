#pragma once
// Checkmate's mixed-integer program over a graph (graph.h), solved with COIN-OR CBC, and the paper's
// two-phase LP rounding for when the solver runs out of time.
//
// The MILP (frontier-advancing, over stages t and nodes i <= t):
//   binary R[t][i], S[t][i] (i < t), FREE[t][i][k] for each node k <= t and each i that is an
//   input of k or k itself; continuous 0 <= U[t][k] <= budget.
//   minimise   sum over t, i of cost_i R[t][i]
//   R[t][t] = 1
//   R[t][k] <= R[t][j] + S[t][j]         for each input j of k         (inputs resident)
//   S[t+1][i] <= R[t][i] + S[t][i]                                       (kept means resident)
//   R[t][i] + S[t][i] <= 1                                               (graph.h: no double count)
//   U[t][0] = sum_i bytes_i S[t][i] + bytes_0 R[t][0]
//   U[t][k] = U[t][k-1] - sum_i bytes_i FREE[t][i][k-1] + bytes_k R[t][k]
//   FREE[t][i][k] = 1 exactly when its hazards h = (1 - R[t][k]) + S[t+1][i] + sum over readers
//   j > k of i of R[t][j] are all 0, written as FREE + h >= 1 and kappa FREE + h <= kappa with kappa
//   the number of hazard terms.
// CBC starts from the keep-everything schedule (graph.h) when it fits the budget: without a
// starting point it may find no integer solution at all on a graph of a hundred nodes.
// U[t][k] is then exactly the live bytes after node k of stage t (graph.h's rule), so the budget on U is the
// budget on simulate_schedule's peak. Memory is divided by the gcd of the sizes (and further when the numbers
// stay large) to keep the coefficients small; the result is re-simulated in exact bytes and re-solved with a
// lowered bound in the rare case rounding let it exceed.
//
// What comes back is always the solver's schedule pruned (prune_schedule, graph.h) and simulated: the
// solver's R may hold needless recomputations of zero-cost nodes, and its S outputs kept where nobody reads
// them; pruning never raises the cost or the peak. It may drop keeps that SolveOptions::constraints asked
// for, so a caller whose schedules obey rules of their own judges the pruned schedule by those rules.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "memory/remat/graph.h"

namespace tessera::memory::remat {

enum class SolveStatus : std::uint8_t {
  Optimal,     // the MILP solved to proven optimality
  Feasible,    // the MILP found a schedule within the budget but the time limit stopped the proof
  Rounded,     // no integer solution in time: the LP relaxation, rounded, gave one within the budget
  Infeasible,  // proven: no schedule meets the budget
  NoSchedule,  // neither the MILP in time nor the rounding found one; not proven infeasible
};
const char* solve_status_name(SolveStatus status);  // "optimal", "feasible", ...

// A linear constraint over the schedule's variables, lo <= sum of coefficient * (R or S)[stage][node] <= hi,
// that narrows the schedules a caller can run (a chain of units, say, cannot regenerate a unit's output
// without rerunning the unit). Terms naming a variable that does not exist (R above the diagonal, S on or
// above it) stand for 0.
struct ScheduleTerm {
  enum class Matrix : std::uint8_t { R, S };
  Matrix matrix = Matrix::R;
  int stage = 0;
  int node = 0;
  double coefficient = 1;
};
struct ScheduleConstraint {
  std::vector<ScheduleTerm> terms;
  double lo = -1e30;
  double hi = 1e30;
};

struct SolveOptions {
  double time_limit_s = 30;  // for CBC's branch and bound; <= 0 skips it and goes to the rounding
  int rounding_tries = 32;   // randomized roundings of S after the deterministic one
  uint64_t seed = 0;         // for the randomized rounding, so a solve is repeatable
  // Added to the program; the rounding keeps only roundings that meet them too.
  std::vector<ScheduleConstraint> constraints{};
  // A schedule for CBC to start from when it fits the budget (and meets the constraints); without one, or
  // when it does not fit, keeping everything when that does.
  std::optional<Schedule> start{};
};

// Whether a schedule meets every constraint (exactly: the coefficients are small integers in practice).
bool meets(const Schedule& schedule, std::span<const ScheduleConstraint> constraints);

struct Solution {
  SolveStatus status = SolveStatus::NoSchedule;
  Schedule schedule;         // empty unless status is Optimal, Feasible or Rounded
  double cost = 0;           // simulate_schedule's, for the schedule above
  int64_t peak_bytes = 0;    // likewise
  double solve_seconds = 0;  // wall time of the whole call
  bool has_schedule() const {
    return status == SolveStatus::Optimal || status == SolveStatus::Feasible || status == SolveStatus::Rounded;
  }
};

// The cheapest schedule whose peak is at most budget_bytes: CBC under the time limit, then the rounding when
// CBC has no integer solution.
Solution solve_milp(const Graph& graph, int64_t budget_bytes, const SolveOptions& options = {});

// The paper's two-phase rounding on its own: solve the LP relaxation, round S (threshold 0.5, then
// options.rounding_tries draws of S[t][i] ~ Bernoulli(LP value) from a generator seeded with options.seed),
// take the minimal R of each (pruned), and return the cheapest one that fits the budget (status Rounded),
// Infeasible when even the relaxation is, NoSchedule when no rounding fits.
Solution round_lp_relaxation(const Graph& graph, int64_t budget_bytes, const SolveOptions& options = {});

struct MinimumBudget {
  int64_t bytes = 0;    // the least peak of the best schedule found
  bool proven = false;  // CBC proved that no schedule has a lower peak
};

// The smallest budget any schedule meets: the same MILP with no budget, minimising the largest U.
MinimumBudget minimum_budget(const Graph& graph, const SolveOptions& options = {});

// solve_milp, but a budget no schedule meets is refused with a tessera::Error naming the smallest budget that
// works, and a solve that finds nothing with one saying so and naming the time limit.
Solution plan_rematerialization(const Graph& graph, int64_t budget_bytes, const SolveOptions& options = {});

}  // namespace tessera::memory::remat
