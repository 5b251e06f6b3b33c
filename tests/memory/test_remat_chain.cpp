// Checkmate on the chain the interpreter runs (remat/chain_checkmate.h): chain schedules map into Checkmate's
// schedules and back unchanged, the solver's schedules translate into chain schedules that chain.h's simulator
// holds within the budget and no slower than Rotor, the cache answers a second call, and a budget nothing meets
// names the least that works.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/check.h"
#include "memory/chain.h"
#include "memory/dtr.h"
#include "memory/optimal.h"
#include "memory/recompute_policy.h"
#include "memory/remat/chain_checkmate.h"

using namespace tessera;
using namespace tessera::memory;
using namespace tessera::config;
using namespace tessera::memory::remat;

namespace {

// Small integer sizes and times; with_extras gives some units forward and backward extra bytes, as a
// transformer's chain has (attention's workspace, the head's logits, selective recomputation's rebuild).
std::vector<ChainUnit> chain_of(int n, uint64_t seed, bool with_extras) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> in(1, 9), own(0, 12), extra(0, 6);
  std::uniform_int_distribution<int> tf(1, 9), tb(1, 9);
  std::vector<ChainUnit> units(static_cast<size_t>(n));
  for (auto& u : units) u.input_bytes = in(rng);
  for (int i = 0; i < n; ++i) {
    ChainUnit& u = units[i];
    u.own_bytes = own(rng);
    u.output_bytes = i + 1 < n ? units[i + 1].input_bytes : 0;
    u.forward_time = tf(rng);
    u.backward_time = tb(rng);
    if (with_extras) {
      u.forward_extra_bytes = extra(rng) / 2;
      u.backward_extra_bytes = extra(rng) / 3;
    }
  }
  return units;
}

// Gives every unit but the loss a rebuildable part, as a transformer block's norm outputs and MLP
// activation are: half of what it keeps, rebuilt in an eighth of its forward time.
std::vector<ChainUnit> with_rebuildable_parts(std::vector<ChainUnit> units) {
  for (size_t i = 0; i + 1 < units.size(); ++i) {
    ChainUnit& u = units[i];
    u.rebuildable_bytes = u.own_bytes / 2;
    u.rebuild_bytes = u.rebuildable_bytes;
    u.selective_forward_extra_bytes = u.rebuildable_bytes / 3;
    u.rebuild_time = u.rebuildable_bytes > 0 ? u.forward_time / 8 : 0.0;
  }
  return units;
}

bool keeps_selectively(const ChainSchedule& s) {
  for (const std::vector<ChainOp>* phase : {&s.forward, &s.backward}) {
    for (const ChainOp& op : *phase) {
      if (op.is_forward() && op.keep == Keep::Selective) return true;
    }
  }
  return false;
}

int64_t none_peak(std::span<const ChainUnit> units) {
  return simulate(units, none_schedule(static_cast<int>(units.size()))).peak_bytes;
}

}  // namespace

// Every chain schedule (none, full, every_k, Rotor's and DTR's at several budgets) is a Checkmate schedule of
// the same time that peaks no higher, meets the chain's constraints, and translates back to itself.
TEST(RematChain, ChainSchedulesRoundTrip) {
  int checked = 0;
  for (int n = 1; n <= 7; ++n) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const auto units = chain_of(n, 100 * n + seed, seed % 2 == 1);
      const ChainGraph chain = chain_training_graph(units);
      const auto constraints = chain_constraints(chain);
      std::vector<ChainSchedule> schedules = {none_schedule(n), full_schedule(n), every_k_schedule(n, 2)};
      const int64_t least = memory::minimum_budget(units), most = none_peak(units);
      for (int64_t budget : {least, (least + most) / 2, most}) {
        schedules.push_back(optimal_schedule(units, budget));
        if (const DtrRun run = dtr_run(units, budget); run.fits) schedules.push_back(run.schedule);
      }
      for (const ChainSchedule& s : schedules) {
        SCOPED_TRACE(fmt::format("n={} seed={} schedule with {} backward ops", n, seed, s.backward.size()));
        const ChainSimulation sim = simulate(units, s);
        const Schedule cm = checkmate_schedule(chain, units, s);
        const ScheduleCost cost = simulate_schedule(chain.graph, cm);
        EXPECT_DOUBLE_EQ(cost.cost, sim.time);
        EXPECT_LE(cost.peak_bytes, sim.peak_bytes);
        EXPECT_TRUE(meets(cm, constraints));
        const std::optional<ChainSchedule> back = chain_schedule(chain, cm);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(*back, s);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 200);
}

// At budgets from Rotor's least to none's peak, Checkmate's schedule runs on the chain within the budget and
// costs no more than Rotor's; the solver proves optimality on these small chains.
TEST(RematChain, SolvedSchedulesFitAndAreNoSlowerThanRotor) {
  int solved = 0, strictly_faster = 0;
  for (int n = 2; n <= 6; ++n) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      const auto units = chain_of(n, 7 * n + seed, seed != 0);
      const int64_t least = memory::minimum_budget(units), most = none_peak(units);
      for (int64_t budget : {least, least + (most - least) / 3, (least + most) / 2, most}) {
        SCOPED_TRACE(fmt::format("n={} seed={} budget={}", n, seed, budget));
        const ChainCheckmate plan = checkmate_chain_schedule(units, budget, {.time_limit_s = 30});
        ASSERT_TRUE(plan.found);
        EXPECT_EQ(plan.source, ChainPlanSource::Solved);
        EXPECT_EQ(plan.status, SolveStatus::Optimal);
        const ChainSimulation sim = simulate(units, plan.schedule);
        EXPECT_LE(sim.peak_bytes, budget);
        const double rotor = simulate(units, optimal_schedule(units, budget)).time;
        EXPECT_LE(sim.time, rotor + 1e-9);
        strictly_faster += sim.time < rotor - 1e-9;
        ++solved;
      }
    }
  }
  RecordProperty("strictly_faster", strictly_faster);
  EXPECT_EQ(solved, 60);
}

// Selective keeps map into the graph as its rebuildable nodes dropped after the forward and rebuilt in the
// backward's stage, and back: the same time, the chain's constraints met. A selective recomputation right
// before its own backward would drop and rebuild in one stage, which the graph does once: it reads back as
// keeping all, and costs the rebuild less.
TEST(RematChain, SelectiveKeepsRoundTrip) {
  int checked = 0;
  for (int n = 2; n <= 6; ++n) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const auto units = with_rebuildable_parts(chain_of(n, 300 * n + seed, seed % 2 == 1));
      const ChainGraph chain = chain_training_graph(units);
      const auto constraints = chain_constraints(chain);
      const auto selective_forward_phase = [&](ChainSchedule s) {
        for (ChainOp& op : s.forward) {
          if (op.keep == Keep::All && units[op.unit].rebuildable_bytes > 0) op.keep = Keep::Selective;
        }
        return s;
      };
      const int64_t least = memory::minimum_budget(units), most = none_peak(units);
      std::vector<ChainSchedule> schedules = {selective_forward_phase(none_schedule(n))};
      for (int64_t budget : {least, (least + most) / 2}) {
        schedules.push_back(selective_forward_phase(optimal_schedule(units, budget)));
      }
      for (const ChainSchedule& s : schedules) {
        if (!keeps_selectively(s)) continue;
        SCOPED_TRACE(fmt::format("n={} seed={} schedule with {} backward ops", n, seed, s.backward.size()));
        const ChainSimulation sim = simulate(units, s);
        const Schedule cm = checkmate_schedule(chain, units, s);
        EXPECT_DOUBLE_EQ(simulate_schedule(chain.graph, cm).cost, sim.time);
        EXPECT_TRUE(meets(cm, constraints));
        const std::optional<ChainSchedule> back = chain_schedule(chain, cm);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(*back, s);
        ++checked;
      }
      ChainSchedule full = full_schedule(n);
      bool changed = false;
      for (ChainOp& op : full.backward) {
        if (op.is_forward() && units[op.unit].rebuildable_bytes > 0) {
          op.keep = Keep::Selective;
          changed = true;
        }
      }
      if (!changed) continue;
      const Schedule cm = checkmate_schedule(chain, units, full);
      EXPECT_TRUE(meets(cm, constraints));
      EXPECT_LT(simulate_schedule(chain.graph, cm).cost, simulate(units, full).time);
      EXPECT_EQ(chain_schedule(chain, cm), std::optional<ChainSchedule>(full_schedule(n)));
    }
  }
  EXPECT_GT(checked, 30);
}

// With rebuildable parts the graph is finer than Rotor's chain: between Rotor's least budget and none's
// peak, Checkmate's schedules run on the chain within the budget, never cost more than Rotor's, and where
// rebuilding a unit's cheap part is worth its memory they keep units selectively and cost less.
TEST(RematChain, RebuildingPartsOfUnitsBeatsRotor) {
  int solved = 0, strictly_faster = 0, selective = 0;
  for (int n = 3; n <= 5; ++n) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      const auto units = with_rebuildable_parts(chain_of(n, 11 * n + seed, seed != 0));
      const int64_t least = memory::minimum_budget(units), most = none_peak(units);
      for (int64_t budget : {least, least + (most - least) / 3, least + 2 * (most - least) / 3}) {
        SCOPED_TRACE(fmt::format("n={} seed={} budget={}", n, seed, budget));
        const ChainCheckmate plan = checkmate_chain_schedule(units, budget, {.time_limit_s = 30});
        ASSERT_TRUE(plan.found);
        const ChainSimulation sim = simulate(units, plan.schedule);
        EXPECT_LE(sim.peak_bytes, budget);
        const double rotor = simulate(units, optimal_schedule(units, budget)).time;
        EXPECT_LE(sim.time, rotor + 1e-9);
        strictly_faster += sim.time < rotor - 1e-9;
        selective += keeps_selectively(plan.schedule);
        ++solved;
      }
    }
  }
  RecordProperty("strictly_faster", strictly_faster);
  EXPECT_EQ(solved, 27);
  EXPECT_GT(strictly_faster, 5);
  EXPECT_GE(selective, strictly_faster) << "what beats Rotor is keeping units selectively";
}

// A second call with the same chain and budget reads the solution from the cache; a damaged cache file costs a
// solve and says why, and is written anew.
TEST(RematChain, CacheAnswersTheSecondCall) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("tessera-remat-cache-{}", ::getpid());
  std::filesystem::remove_all(dir);
  const auto units = chain_of(5, 42, true);
  const int64_t budget = (memory::minimum_budget(units) + none_peak(units)) / 2;
  const ChainCheckmateOptions options{.time_limit_s = 30, .cache_dir = dir};
  const ChainCheckmate first = checkmate_chain_schedule(units, budget, options);
  ASSERT_TRUE(first.found);
  EXPECT_EQ(first.source, ChainPlanSource::Solved);
  ASSERT_TRUE(std::filesystem::exists(first.cache_file));
  const ChainCheckmate second = checkmate_chain_schedule(units, budget, options);
  EXPECT_EQ(second.source, ChainPlanSource::Cached);
  EXPECT_EQ(second.schedule, first.schedule);
  EXPECT_EQ(second.status, first.status);
  EXPECT_EQ(second.solve_seconds, 0);
  // Another budget is another file.
  const ChainCheckmate other = checkmate_chain_schedule(units, budget + 1, options);
  EXPECT_EQ(other.source, ChainPlanSource::Solved);
  EXPECT_NE(other.cache_file, first.cache_file);
  std::ofstream(first.cache_file, std::ios::trunc) << "{\"format\": \"tessera.remat.v1\", \"trunc";
  const ChainCheckmate damaged = checkmate_chain_schedule(units, budget, options);
  EXPECT_EQ(damaged.source, ChainPlanSource::Solved);
  EXPECT_NE(damaged.cache_note.find(first.cache_file), std::string::npos) << damaged.cache_note;
  EXPECT_EQ(checkmate_chain_schedule(units, budget, options).source, ChainPlanSource::Cached);
  std::filesystem::remove_all(dir);
}

// Below what any schedule of the chain meets, nothing is found and the least budget is named; with no time for
// the solver, the rounding or Rotor's schedule still gives a plan within the budget.
TEST(RematChain, NamesTheLeastBudgetAndFallsBack) {
  const auto units = chain_of(6, 9, true);
  const int64_t least = memory::minimum_budget(units);
  const ChainCheckmate below = checkmate_chain_schedule(units, least / 2, {.time_limit_s = 10});
  EXPECT_FALSE(below.found);
  EXPECT_EQ(below.least_budget, least);
  const ChainCheckmate hurried = checkmate_chain_schedule(units, least, {.time_limit_s = 0});
  ASSERT_TRUE(hurried.found);
  EXPECT_TRUE(hurried.source == ChainPlanSource::Fallback || hurried.status == SolveStatus::Rounded)
      << chain_plan_source_name(hurried.source);
  EXPECT_LE(simulate(units, hurried.schedule).peak_bytes, least);
}

// The policy name reaches the chain planner only through exec, which links the solver.
TEST(RematChain, MemoryLibraryRefusesToPlanCheckmateItself) {
  const auto units = chain_of(3, 1, false);
  EXPECT_EQ(parse_recompute_policy("checkmate"), RecomputePolicy::Checkmate);
  EXPECT_THROW(plan_recompute(RecomputePolicy::Checkmate, units, 1, none_peak(units)), Error);
}
