// Checkmate's MILP against the exhaustive search on random graphs, the LP rounding, and the MILP on a chain's
// training graph against Rotor's dynamic program (optimal.h).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "memory/chain.h"
#include "memory/optimal.h"
#include "memory/remat/chain_checkmate.h"
#include "memory/remat/exhaustive.h"
#include "memory/remat/graph.h"
#include "memory/remat/milp.h"
#include "remat_test_graphs.h"

using namespace tessera;
using namespace tessera::memory;
using namespace tessera::memory::remat;

using test_graphs::random_chain;
using test_graphs::random_graph;

// For random graphs of 4..12 nodes: the exhaustive search's least peak is the MILP's minimum budget, below it
// both refuse, and at the least peak, the keep-everything peak and budgets between them the MILP's schedule
// fits and costs the exhaustive minimum.
TEST(RematMilp, EqualsExhaustiveSearchOnRandomGraphs) {
  int solved = 0, recomputing = 0;
  for (int n = 4; n <= 12; ++n) {
    const int graphs = n <= 9 ? 3 : 2;
    for (int seed = 0; seed < graphs; ++seed) {
      const Graph g = random_graph(n, 1000 * n + seed);
      SCOPED_TRACE(fmt::format("n={} seed={}", n, seed));
      const auto front = exhaustive_frontier(g);
      ASSERT_FALSE(front.empty());
      const int64_t least = front.front().peak_bytes;
      const int64_t all = simulate_schedule(g, keep_everything_schedule(g)).peak_bytes;
      ASSERT_LE(least, all);
      const auto min_budget = minimum_budget(g);
      EXPECT_TRUE(min_budget.proven);
      EXPECT_EQ(min_budget.bytes, least);
      if (least > 0) {
        EXPECT_FALSE(cheapest_within(front, least - 1).has_value());
        EXPECT_EQ(solve_milp(g, least - 1).status, SolveStatus::Infeasible);
      }
      std::vector<int64_t> budgets = {least, all, all + 7};
      for (int q = 1; q < 4; ++q)
        budgets.push_back(least + (all - least) * q / 4);
      for (const int64_t budget : budgets) {
        SCOPED_TRACE(fmt::format("budget={} (least {}, keep-everything {})", budget, least, all));
        const auto want = cheapest_within(front, budget);
        ASSERT_TRUE(want.has_value());
        // The search's own schedule holds to the simulator.
        const auto found = exhaustive_schedule(g, budget);
        ASSERT_TRUE(found.has_value());
        const auto found_sim = simulate_schedule(g, *found);
        EXPECT_EQ(found_sim.cost, *want);
        EXPECT_LE(found_sim.peak_bytes, budget);
        const auto sol = solve_milp(g, budget);
        ASSERT_EQ(sol.status, SolveStatus::Optimal);
        EXPECT_EQ(sol.cost, *want);
        const auto sim = simulate_schedule(g, sol.schedule);
        EXPECT_LE(sim.peak_bytes, budget);
        EXPECT_EQ(sim.cost, sol.cost);
        EXPECT_EQ(sim.peak_bytes, sol.peak_bytes);
        ++solved;
        if (sim.computations > n)
          ++recomputing;
      }
    }
  }
  // The comparison must exercise recomputation, not only keep-everything schedules.
  EXPECT_GT(recomputing, solved / 5) << recomputing << " of " << solved << " schedules recompute";
}

// The rounding of the LP relaxation, called directly and through a time limit of zero: a schedule that fits,
// costs at least the optimum, and reports that it was rounded.
TEST(RematMilp, LpRoundingGivesFeasibleSchedules) {
  int rounded = 0, tried = 0;
  for (int seed = 0; seed < 6; ++seed) {
    const Graph g = random_graph(10, 77 + seed);
    const auto front = exhaustive_frontier(g);
    const int64_t least = front.front().peak_bytes;
    const int64_t all = simulate_schedule(g, keep_everything_schedule(g)).peak_bytes;
    for (const int64_t budget : {all, least + (all - least) * 3 / 4, least + (all - least) / 2}) {
      SCOPED_TRACE(fmt::format("seed={} budget={}", seed, budget));
      ++tried;
      const auto sol = round_lp_relaxation(g, budget, SolveOptions{.rounding_tries = 32, .seed = 5});
      ASSERT_TRUE(sol.status == SolveStatus::Rounded || sol.status == SolveStatus::NoSchedule)
          << solve_status_name(sol.status);
      if (sol.status != SolveStatus::Rounded)
        continue;
      ++rounded;
      const auto sim = simulate_schedule(g, sol.schedule);
      EXPECT_LE(sim.peak_bytes, budget);
      EXPECT_EQ(sim.cost, sol.cost);
      EXPECT_GE(sol.cost, *cheapest_within(front, budget));
    }
    // At the keep-everything peak the relaxation keeps everything, and rounding finds it.
    const auto at_all = solve_milp(g, all, SolveOptions{.time_limit_s = 0});
    EXPECT_EQ(at_all.status, SolveStatus::Rounded);
    EXPECT_LE(at_all.peak_bytes, all);
  }
  EXPECT_GE(rounded, tried / 2) << rounded << " of " << tried;
  // Below the least peak even the relaxation may fit (it is fractional); the rounding must not return a
  // schedule over the budget.
  const Graph g = random_graph(8, 3);
  const int64_t least = exhaustive_frontier(g).front().peak_bytes;
  const auto below = round_lp_relaxation(g, least - 1);
  EXPECT_FALSE(below.has_schedule());
}

// On a chain's training graph (graph.h's chain_graph), a Rotor schedule is a Checkmate schedule with the same
// time and a peak no higher, so at every budget Rotor meets the MILP is no slower; x0's cost is above every
// schedule's so the MILP never recomputes it, and is subtracted.
TEST(RematMilp, NoSlowerThanRotorOnAChainsTrainingGraph) {
  int strictly_faster = 0;
  for (int n = 2; n <= 4; ++n) {
    for (int seed = 0; seed < 3; ++seed) {
      std::mt19937_64 rng(31 * n + seed);
      const auto units = random_chain(n, rng);
      const double x0_cost = 1000;
      const Graph g = chain_graph(units, x0_cost);
      const auto front = exhaustive_frontier(g);
      const int64_t rotor_least = memory::minimum_budget(units, 1);
      const int64_t none_peak = simulate_schedule(g, keep_everything_schedule(g)).peak_bytes;
      const std::vector<int64_t> budgets = {rotor_least, rotor_least + 1, (rotor_least + none_peak) / 2, none_peak};
      for (const int64_t budget : budgets) {
        SCOPED_TRACE(fmt::format("n={} seed={} budget={}", n, seed, budget));
        const auto rotor = memory::simulate(units, optimal_schedule(units, budget, 1));
        ASSERT_LE(rotor.peak_bytes, budget);
        const auto sol = solve_milp(g, budget);
        ASSERT_EQ(sol.status, SolveStatus::Optimal);
        const double checkmate_time = sol.cost - x0_cost;
        EXPECT_LE(checkmate_time, rotor.time + 1e-9);
        EXPECT_EQ(sol.cost, *cheapest_within(front, budget));
        if (checkmate_time < rotor.time - 1e-9)
          ++strictly_faster;
      }
    }
  }
  RecordProperty("strictly_faster", strictly_faster);
}
