// DTR over a chain: its schedule against chain.h's simulator and against the optimal solver (a
// lower bound among persistent schedules), its thrashing and its refusal of a budget too small.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "memory/chain.h"
#include "memory/dtr.h"
#include "memory/optimal.h"
#include "memory/recompute_policy.h"

#include "chain_search.h"

using namespace tessera;
using namespace tessera::memory;
using namespace tessera::config;
using tessera::memory::chain_search::brute_min_time;

namespace {

// Small integer sizes (some zero) and distinct real times, so that budgets step byte by byte and
// the optimal solver runs with quantum 1 (exact). `uniform` gives x_1..x_{n-1} one size, as a
// transformer's blocks have.
std::vector<ChainUnit> random_chain(int n, std::mt19937_64& rng, bool uniform) {
  std::uniform_int_distribution<int64_t> in(1, 9), own(0, 9), extra(0, 4);
  std::uniform_real_distribution<double> tf(0.5, 2.0), tb(0.5, 3.0);
  std::vector<ChainUnit> units(n);
  const int64_t block = in(rng);
  for (int i = 0; i < n; ++i) units[i].input_bytes = uniform && i > 0 ? block : in(rng);
  for (int i = 0; i < n; ++i) {
    units[i].own_bytes = own(rng);
    units[i].output_bytes = i + 1 < n ? units[i + 1].input_bytes : 0;
    units[i].backward_extra_bytes = rng() % 3 == 0 ? extra(rng) : 0;
    units[i].forward_extra_bytes = rng() % 3 == 0 ? extra(rng) : 0;
    units[i].forward_time = tf(rng);
    units[i].backward_time = tb(rng);
  }
  return units;
}

// Rotor's class (optimal.h): once a forward of unit i keeps x_i, no later forward of unit i drops it.
bool persistent(const ChainSchedule& s, int n) {
  std::vector<char> kept(n, 0);
  for (const auto* phase : {&s.forward, &s.backward}) {
    for (const ChainOp& op : *phase) {
      if (!op.is_forward()) continue;
      if (op.keep == Keep::Nothing && kept[op.unit]) return false;
      if (op.keep != Keep::Nothing) kept[op.unit] = 1;
    }
  }
  return true;
}

double step_time(const std::vector<ChainUnit>& units) {
  double t = 0;
  for (const ChainUnit& u : units) t += u.forward_time + u.backward_time;
  return t;
}

}  // namespace

// On random chains and every budget from the optimal solver's least to none's peak: wherever DTR
// fits, its schedule is valid, peaks within the budget and within what DTR held, and takes DTR's
// time; it fits at its least budget and from none's peak up, and not one byte below its least.
// Its time is a lower bound's check: never below the optimal persistent schedule's when DTR's
// schedule is persistent, and never below the exhaustive search over every schedule when it is not
// (a later eviction can drop an input an earlier forward kept: DTR then leaves Rotor's class and
// can beat it, on chains whose inputs differ in size). Up to 8 units, where that search is cheap.
TEST(Dtr, RandomChainsFitTheirBudgetAndRespectTheLowerBounds) {
  int cases = 0, fitted = 0, slower = 0, outside = 0, beat = 0;
  for (bool uniform : {true, false}) {
    for (int n = 1; n <= 8; ++n) {
      for (uint64_t seed = 1; seed <= 8; ++seed) {
        std::mt19937_64 rng(seed * 1000 + n + (uniform ? 500 : 0));
        const std::vector<ChainUnit> units = random_chain(n, rng, uniform);
        const int64_t none = simulate(units, none_schedule(n)).peak_bytes;
        const int64_t rotor_least = minimum_budget(units, 1);
        const int64_t dtr_least = dtr_minimum_budget(units);
        const std::string what = fmt::format("{} chain of {} units, seed {}", uniform ? "uniform" : "mixed", n, seed);
        EXPECT_GE(dtr_least, rotor_least) << what << ": DTR cannot need less than the least peak of any schedule";
        EXPECT_TRUE(dtr_run(units, dtr_least).fits) << what;
        if (dtr_least > 0) EXPECT_FALSE(dtr_run(units, dtr_least - 1).fits) << what;
        for (int64_t budget = rotor_least; budget <= none; ++budget) {
          ++cases;
          const DtrRun r = dtr_run(units, budget);
          if (!r.fits) {
            EXPECT_LT(budget, none) << what << ": DTR evicts nothing at none's peak";
            continue;
          }
          ++fitted;
          const std::string at = fmt::format("{}, budget {}", what, budget);
          const ChainSimulation sim = simulate(units, r.schedule);
          EXPECT_LE(sim.peak_bytes, budget) << at;
          EXPECT_LE(sim.peak_bytes, r.held_peak) << at;
          EXPECT_DOUBLE_EQ(sim.time, r.time) << at;
          EXPECT_EQ(sim.recomputed_forwards, r.rematerialized_forwards) << at;
          const double best = simulate(units, optimal_schedule(units, budget, 1)).time;
          const double tol = 1e-9 * best;
          if (persistent(r.schedule, n)) {
            EXPECT_GE(sim.time, best - tol) << at << ": a persistent DTR schedule beat the optimal persistent one";
          } else {
            ++outside;
            if (sim.time < best - tol) {
              ++beat;
              EXPECT_GE(sim.time, brute_min_time(units, budget, false) - tol) << at << ": DTR beat every schedule";
            }
          }
          slower += sim.time > best + tol ? 1 : 0;
          if (budget == none) {
            EXPECT_EQ(r.schedule, none_schedule(n)) << what;
            EXPECT_EQ(r.evictions, 0) << what;
          }
        }
      }
    }
  }
  std::printf("DTR on random chains: fits %d of %d (chain, budget) pairs from the optimal solver's least budget up; "
              "slower than optimal in %d; outside Rotor's persistent class in %d, faster than optimal in %d\n",
              fitted, cases, slower, outside, beat);
  EXPECT_GT(fitted, cases / 2);
  EXPECT_GT(slower, 0) << "a greedy run-time policy should lose to the planned optimum somewhere";
}

// dtr_schedule refuses a budget DTR does not meet and names the least it meets, found by bisection.
TEST(Dtr, TooSmallBudgetNamesTheLeast) {
  std::mt19937_64 rng(7);
  const std::vector<ChainUnit> units = random_chain(10, rng, true);
  const int64_t least = dtr_minimum_budget(units);
  EXPECT_NO_THROW(dtr_schedule(units, least));
  try {
    dtr_schedule(units, least - 1);
    ADD_FAILURE() << "a budget of " << least - 1 << " bytes was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(fmt::format("least budget DTR meets is {} bytes", least)), std::string::npos) << msg;
    EXPECT_NE(msg.find("thrashes"), std::string::npos) << msg;
  }
  EXPECT_THROW(dtr_schedule(units, 0), Error);
  // plan_recompute takes the policy by name and its budget as optimal does.
  EXPECT_EQ(plan_recompute(RecomputePolicy::Dtr, units, 0, least), dtr_schedule(units, least));
  EXPECT_EQ(parse_recompute_policy("dtr"), RecomputePolicy::Dtr);
  EXPECT_EQ(recompute_policy_name(RecomputePolicy::Dtr), "dtr");
}

// Near its least budget DTR recomputes more than the optimal schedule, and at its least it still
// finishes: the simulation terminates with every backward done rather than looping.
TEST(Dtr, ThrashesNearItsLeastBudget) {
  std::mt19937_64 rng(11);
  const std::vector<ChainUnit> units = random_chain(12, rng, true);
  const int64_t least = dtr_minimum_budget(units);
  const DtrRun r = dtr_run(units, least);
  ASSERT_TRUE(r.fits) << r.failure;
  const double best = simulate(units, optimal_schedule(units, least, 1)).time;
  std::printf("12-unit chain at DTR's least budget %lld: DTR %.3f, optimal %.3f, none %.3f; %d evictions, %d "
              "rematerialized forwards\n",
              static_cast<long long>(least), r.time, best, step_time(units), r.evictions,
              r.rematerialized_forwards);
  EXPECT_GT(r.time, best);
  EXPECT_GT(r.evictions, 0);
}

// An input whose producer's activations are already evicted costs nothing to evict when the
// producer's input is resident: the forward that brings those activations back brings the input
// too. Four units (inputs of 1 byte, activations of 9, the loss unit's 10): the loss forward needs
// 19 bytes freed within a budget of 22; A_0 and A_1 free 18, and the last byte comes from x_1 (1
// byte, no extra forward) rather than A_2 (9 bytes, one forward more), so DTR reruns forwards 0 and
// 1 only, as the optimal schedule does. Charging x_1 its neighbourhood's two forwards, as DTR did
// before, evicted A_2 and reran three.
TEST(Dtr, EvictsAnInputItsProducersRerunBringsBackForFree) {
  std::vector<ChainUnit> units(4);
  for (int i = 0; i < 4; ++i) {
    units[i].input_bytes = 1;
    units[i].own_bytes = i < 3 ? 9 : 10;
    units[i].output_bytes = i < 3 ? 1 : 0;
    units[i].forward_time = 1;
    units[i].backward_time = 2;
  }
  const int64_t budget = 22;
  const DtrRun r = dtr_run(units, budget);
  ASSERT_TRUE(r.fits) << r.failure;
  const ChainSimulation sim = simulate(units, r.schedule);
  EXPECT_LE(sim.peak_bytes, budget);
  EXPECT_EQ(r.rematerialized_forwards, 2);
  EXPECT_EQ(r.schedule.forward[1].keep, Keep::Nothing) << "x_1 evicted, its forward's keep fixed up";
  EXPECT_EQ(r.schedule.forward[2].keep, Keep::All) << "A_2 kept";
  EXPECT_DOUBLE_EQ(sim.time, simulate(units, optimal_schedule(units, budget, 1)).time);
}
