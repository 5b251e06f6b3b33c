// The optimal recompute solver against an exhaustive search over chain.h's states, against the
// simple policies, and at the edges of its budget.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "memory/chain.h"
#include "memory/optimal.h"
#include "memory/recompute_policy.h"

#include "chain_search.h"

using namespace tessera;
using namespace tessera::memory;
using tessera::memory::chain_search::BruteForce;
using tessera::memory::chain_search::brute_min_time;
using tessera::memory::chain_search::kInf;

namespace {

// Sizes are small integers (some zero), times distinct reals: the optimum is unique in time but
// rarely in memory, which is what the budgets probe.
std::vector<ChainUnit> random_chain(int n, std::mt19937_64& rng, int64_t scale = 1, int64_t jitter = 0) {
  std::uniform_int_distribution<int64_t> in(1, 9), own(0, 9), extra(0, 4), noise(0, jitter);
  std::uniform_real_distribution<double> tf(0.5, 2.0), tb(0.5, 3.0);
  std::vector<ChainUnit> units(n);
  for (int i = 0; i < n; ++i) units[i].input_bytes = in(rng) * scale + noise(rng);
  for (int i = 0; i < n; ++i) {
    units[i].own_bytes = own(rng) * scale + noise(rng);
    units[i].output_bytes = i + 1 < n ? units[i + 1].input_bytes : 0;
    units[i].backward_extra_bytes = (rng() % 3 == 0 ? extra(rng) : 0) * scale;
    units[i].forward_time = tf(rng);
    units[i].backward_time = tb(rng);
  }
  return units;
}

// Forward extras from a generator of their own, so the chains above stay what the pinned cases
// were found on.
void add_forward_extras(std::vector<ChainUnit>& units, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> extra(0, 4);
  for (ChainUnit& u : units) u.forward_extra_bytes = rng() % 3 == 0 ? extra(rng) : 0;
}

std::string refusal_of_optimal(const std::vector<ChainUnit>& units, int64_t budget, int64_t quantum = 0) {
  try {
    optimal_schedule(units, budget, quantum);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Every chain of 1..8 units, eight seeds each: the DP's time equals the persistent search's at
// every budget from the least feasible one to none's peak (or an even spread of 40 of them), and
// its least budget is the least peak of any schedule, persistent or not.
TEST(OptimalRecompute, EqualsExhaustiveSearchOfPersistentSchedules) {
  int compared = 0;
  for (int n = 1; n <= 8; ++n)
    for (int seed = 0; seed < 8; ++seed) {
      std::mt19937_64 rng(1000 * n + seed);
      auto units = random_chain(n, rng);
      if (seed % 2 == 1) add_forward_extras(units, 5 * n + seed);  // half the chains hold extra during forwards
      const BruteForce brute(units, true);
      const int64_t least = brute.min_peak();
      ASSERT_EQ(minimum_budget(units, 1), least) << "n=" << n << " seed=" << seed;
      ASSERT_EQ(BruteForce(units, false).min_peak(), least) << "n=" << n << " seed=" << seed;
      ASSERT_EQ(optimal_quantum(units), 1);
      EXPECT_THROW(optimal_schedule(units, least - 1, 1), Error);
      const int64_t none_peak = simulate(units, none_schedule(n)).peak_bytes;
      const int64_t span = none_peak - least;
      const int64_t steps = std::min<int64_t>(span, 40);
      for (int64_t j = 0; j <= steps; ++j) {
        const int64_t budget = steps == 0 ? least : least + span * j / steps;
        const double expected = brute.min_time(budget);
        ASSERT_LT(expected, kInf);
        const ChainSchedule s = optimal_schedule(units, budget, 1);
        const ChainSimulation r = simulate(units, s);
        EXPECT_LE(r.peak_bytes, budget);
        ASSERT_NEAR(r.time, expected, 1e-9 * expected) << "n=" << n << " seed=" << seed << " budget=" << budget;
        // The automatic quantum is 1 for such chains: the same answer.
        EXPECT_EQ(optimal_schedule(units, budget), s);
        ++compared;
      }
    }
  EXPECT_GT(compared, 500);
}

// When x_1..x_{n-1} have one size (a transformer's blocks; x_0, the tokens, may be smaller),
// holding an earlier input instead of a later one saves nothing, and the persistent optimum is the
// optimum of every schedule: the DP equals the full search.
TEST(OptimalRecompute, EqualsFullSearchWhenInnerActivationsAreUniform) {
  int compared = 0;
  for (int n = 1; n <= 8; ++n)
    for (int seed = 0; seed < 6; ++seed) {
      std::mt19937_64 rng(77 * n + seed);
      auto units = random_chain(n, rng);
      for (int i = 0; i < n; ++i) units[i].input_bytes = i == 0 && seed % 2 == 1 ? 1 : 5;
      for (int i = 0; i + 1 < n; ++i) units[i].output_bytes = units[i + 1].input_bytes;
      const BruteForce full(units, false);
      const int64_t least = full.min_peak();
      ASSERT_EQ(minimum_budget(units, 1), least);
      const int64_t none_peak = simulate(units, none_schedule(n)).peak_bytes;
      for (int64_t budget = least; budget <= none_peak; budget += std::max<int64_t>(1, (none_peak - least) / 16)) {
        const double expected = full.min_time(budget);
        const ChainSimulation r = simulate(units, optimal_schedule(units, budget, 1));
        ASSERT_NEAR(r.time, expected, 1e-9 * expected) << "n=" << n << " seed=" << seed << " budget=" << budget;
        ++compared;
      }
    }
  EXPECT_GT(compared, 200);
}

// The limit of the persistent class, pinned on the smallest case the full search found: storing
// the small x_1 through the peak and advancing it to x_2 later (forward(1, keep=nothing) after
// backward(5)) beats every persistent schedule by 3%. About 0.4% of random (chain, budget) pairs
// of up to 8 units have such a gap, at most ~5%. The full search never loses to the DP.
TEST(OptimalRecompute, NonPersistentSchedulesCanBeFasterOnUnevenChains) {
  std::mt19937_64 rng(1000 * 6 + 7);
  const auto units = random_chain(6, rng);
  const double dp = simulate(units, optimal_schedule(units, 35, 1)).time;
  const double full = brute_min_time(units, 35, false);
  EXPECT_NEAR(dp, brute_min_time(units, 35, true), 1e-9 * dp);
  EXPECT_GT(dp, full * 1.02);
  for (int seed = 0; seed < 6; ++seed) {
    std::mt19937_64 r(500 + seed);
    const auto chain = random_chain(7, r);
    const int64_t least = minimum_budget(chain, 1);
    for (int64_t budget = least; budget < least + 20; budget += 4)
      EXPECT_GE(simulate(chain, optimal_schedule(chain, budget, 1)).time, brute_min_time(chain, budget, false) * (1 - 1e-12));
  }
}

// Units alternate between memory-heavy but quick ones (attention scores) and light but slow ones:
// every_k recomputes them alike, the solver spends its recomputation on the quick ones, and is
// strictly faster at every_k's own peak.
TEST(OptimalRecompute, BeatsEveryKOnHeterogeneousChain) {
  const int n = 16;
  std::vector<ChainUnit> units(n);
  for (int i = 0; i < n; ++i) {
    const bool heavy = i % 2 == 0;
    units[i].input_bytes = 4 + i % 3;
    units[i].own_bytes = heavy ? 40 : 6;
    units[i].forward_time = heavy ? 1.0 : 8.0;
    units[i].backward_time = heavy ? 2.0 : 16.0;
  }
  for (int i = 0; i + 1 < n; ++i) units[i].output_bytes = units[i + 1].input_bytes;
  auto slow_recomputed = [](const ChainSchedule& s) {
    return std::count_if(s.backward.begin(), s.backward.end(),
                         [](const ChainOp& op) { return op.is_forward() && op.unit % 2 == 1; });
  };
  for (int k : {1, 2, 3, 4, 6}) {
    const ChainSchedule every_k = every_k_schedule(n, k);
    const ChainSimulation every = simulate(units, every_k);
    const ChainSchedule optimal = optimal_schedule(units, every.peak_bytes);
    const ChainSimulation best = simulate(units, optimal);
    EXPECT_LE(best.peak_bytes, every.peak_bytes);
    EXPECT_LT(best.time, every.time) << "k=" << k << ": every_k " << every.time << ", optimal " << best.time;
    EXPECT_LT(slow_recomputed(optimal), slow_recomputed(every_k)) << "k=" << k;
  }
}

// On any chain, whatever the quantum rounds, the solver is never slower than a simple policy that
// fits the budget. Sizes in MiB with odd bytes make the automatic quantum round every size.
TEST(OptimalRecompute, NeverSlowerThanSimplePolicies) {
  std::mt19937_64 rng(7);
  int rounded = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 24);
    const auto units = trial % 2 == 0 ? random_chain(n, rng) : random_chain(n, rng, 1 << 20, 99'999);
    if (optimal_quantum(units) > 1) ++rounded;
    std::vector<ChainSchedule> simple{none_schedule(n)};
    for (int k = 1; k < n; ++k) simple.push_back(every_k_schedule(n, k));
    for (const ChainSchedule& s : simple) {
      const ChainSimulation policy = simulate(units, s);
      for (const int64_t budget : {policy.peak_bytes, policy.peak_bytes + policy.peak_bytes / 10}) {
        const ChainSimulation best = simulate(units, optimal_schedule(units, budget));
        EXPECT_LE(best.peak_bytes, budget);
        EXPECT_LE(best.time, policy.time * (1 + 1e-12)) << "trial " << trial << " n=" << n << " budget " << budget;
      }
    }
  }
  EXPECT_GT(rounded, 10);
}

// A quantum above 1 makes the DP conservative: never over budget, never faster than the exact
// optimum, and its least budget never below the exact one.
TEST(OptimalRecompute, CoarseQuantumStaysWithinBudget) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 10; ++trial) {
    const auto units = random_chain(7, rng);
    const int64_t exact_least = minimum_budget(units, 1);
    for (int64_t q : {2, 3, 5}) {
      const int64_t least = minimum_budget(units, q);
      EXPECT_GE(least, exact_least);
      const int64_t none_peak = simulate(units, none_schedule(7)).peak_bytes;
      for (int64_t budget = least; budget <= none_peak; budget += 3) {
        const ChainSimulation r = simulate(units, optimal_schedule(units, budget, q));
        EXPECT_LE(r.peak_bytes, budget);
        EXPECT_GE(r.time, brute_min_time(units, budget) * (1 - 1e-12));
      }
      EXPECT_THROW(optimal_schedule(units, least - 1, q), Error);
    }
  }
}

TEST(OptimalRecompute, RefusesABudgetBelowTheMinimumNamingIt) {
  std::mt19937_64 rng(3);
  const auto units = random_chain(12, rng, 1 << 20, 4095);
  const int64_t least = minimum_budget(units);
  EXPECT_NO_THROW(optimal_schedule(units, least));
  const std::string message = refusal_of_optimal(units, least - 1);
  EXPECT_NE(message.find(fmt::format("an activation budget of {} bytes is below the minimum {} bytes", least - 1, least)),
            std::string::npos)
      << message;
  EXPECT_NE(refusal_of_optimal(units, 0).find(fmt::format("minimum {} bytes", least)), std::string::npos);
  EXPECT_NE(refusal_of_optimal(units, least, -1).find("quantum"), std::string::npos);
}

// With room for everything the answer is none: no recomputation. At the least budget the schedule
// is valid and fits.
TEST(OptimalRecompute, UnlimitedBudgetIsNoneAndLeastBudgetFits) {
  std::mt19937_64 rng(5);
  for (int n : {1, 2, 5, 20}) {
    const auto units = random_chain(n, rng, 1 << 20, 777);
    EXPECT_EQ(optimal_schedule(units, std::numeric_limits<int64_t>::max()), none_schedule(n));
    const ChainSimulation none = simulate(units, none_schedule(n));
    EXPECT_EQ(optimal_schedule(units, none.peak_bytes), none_schedule(n));
    const int64_t least = minimum_budget(units);
    const ChainSimulation tight = simulate(units, optimal_schedule(units, least));
    EXPECT_LE(tight.peak_bytes, least);
    EXPECT_GE(tight.time, none.time);
    if (n >= 5) {
      EXPECT_GT(tight.recomputed_forwards, 0);
    }
  }
}

// Transformer-sized chains with about 2000 memory slots: reports the solve time, asserts only
// that it finishes within budget and saves memory.
TEST(OptimalRecompute, SolvesLongChains) {
  for (int n : {60, 100}) {
    std::mt19937_64 rng(n);
    std::uniform_int_distribution<int64_t> own(150 << 20, 250 << 20);
    std::uniform_real_distribution<double> t(0.8, 1.2);
    std::vector<ChainUnit> units(n);
    for (int i = 0; i < n; ++i) {
      units[i].input_bytes = 24 << 20;
      units[i].own_bytes = own(rng);
      units[i].output_bytes = i + 1 < n ? 24 << 20 : 0;
      units[i].forward_time = t(rng);
      units[i].backward_time = 2 * t(rng);
    }
    const ChainSimulation none = simulate(units, none_schedule(n));
    const int64_t budget = none.peak_bytes / 2;
    const auto t0 = std::chrono::steady_clock::now();
    const ChainSchedule s = optimal_schedule(units, budget);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const ChainSimulation r = simulate(units, s);
    EXPECT_LE(r.peak_bytes, budget);
    EXPECT_GT(r.recomputed_forwards, 0);
    std::printf("n=%d quantum=%lld bytes: solved in %.3f s, time %.2f vs none %.2f, peak %.0f of %.0f MiB\n", n,
                static_cast<long long>(optimal_quantum(units)), seconds, r.time, none.time, r.peak_bytes / 1048576.0,
                budget / 1048576.0);
  }
}

