// DTR against the optimal schedule on the chain a GPT-2 124M run plans over (exec::stage_chain with
// the FLOP model's unit times): how much more it recomputes at the same budgets.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "config/model_config.h"
#include "exec/program.h"
#include "exec/recompute.h"
#include "memory/dtr.h"
#include "memory/optimal.h"
#include "memory/recompute_policy.h"
#include "memory/remat/chain_checkmate.h"

using namespace tessera;

namespace {

// The unit without its rebuildable part: keeping it selectively is no choice.
memory::ChainUnit whole(memory::ChainUnit u) {
  u.rebuildable_bytes = u.rebuild_bytes = u.selective_forward_extra_bytes = 0;
  u.rebuild_time = 0;
  return u;
}

}  // namespace

// At eight budgets spread from the optimal solver's least to none's peak, DTR's schedule fits (or,
// below DTR's own least budget, is refused), is valid, recomputes no less than the optimal schedule,
// and at most 1.3 times as much (extra compute over none's, FLOP-model times); a finer scan finds
// budgets where it is more (below). The measured ratios are printed; docs/benchmarks.md reports them.
TEST(DtrChain, Gpt2SmallExtraComputeAgainstOptimal) {
  const config::ModelConfig model = config::gpt2_124m();
  const int B = 4, T = 256;
  const exec::StagePlan plan = exec::even_stages(model.n_layer + 2, 1);
  // Whole units, as Rotor's dynamic program sees them: without the rebuildable parts DTR would evict
  // first (below), so that the comparison is of the two on the same choices.
  std::vector<memory::ChainUnit> chain =
      exec::stage_chain(model, plan.stages.front(), B, T, false, exec::nominal_unit_times(model, B, T));
  for (memory::ChainUnit& u : chain) u = whole(u);
  const int n = static_cast<int>(chain.size());
  const memory::ChainSimulation none = memory::simulate(chain, memory::none_schedule(n));
  const int64_t rotor_least = memory::minimum_budget(chain);
  const int64_t dtr_least = memory::dtr_minimum_budget(chain);
  std::printf("GPT-2 124M, B %d, T %d: %d units; none peaks at %.1f MiB, optimal needs %.1f MiB, DTR %.1f MiB\n", B, T,
              n, none.peak_bytes / 1048576.0, rotor_least / 1048576.0, dtr_least / 1048576.0);
  // No comparison of the least budgets: optimal's is rounded up to its memory quantum (optimal.h),
  // and on this chain DTR's exact least falls just below it.
  EXPECT_LT(dtr_least, none.peak_bytes) << "DTR should save memory on a transformer";
  int compared = 0;
  for (int k = 0; k <= 7; ++k) {
    const int64_t budget = rotor_least + (none.peak_bytes - rotor_least) * k / 8;
    const double optimal = memory::simulate(chain, memory::optimal_schedule(chain, budget)).time - none.time;
    const memory::DtrRun r = memory::dtr_run(chain, budget);
    if (!r.fits) {
      EXPECT_LT(budget, memory::dtr_minimum_budget(chain, budget));
      std::printf("  budget %7.1f MiB: optimal recomputes %.3g, DTR does not fit\n", budget / 1048576.0, optimal);
      EXPECT_THROW(memory::dtr_schedule(chain, budget), Error);
      continue;
    }
    const memory::ChainSimulation sim = memory::simulate(chain, r.schedule);
    EXPECT_LE(sim.peak_bytes, budget);
    const double dtr = sim.time - none.time;
    EXPECT_GE(dtr, optimal * (1 - 1e-9)) << "budget " << budget;
    const double ratio = optimal > 0 ? dtr / optimal : 0;
    EXPECT_LE(dtr, 1.3 * optimal) << "budget " << budget;
    std::printf("  budget %7.1f MiB: extra compute optimal %.4g, DTR %.4g (ratio %.3f; %d evictions, %d remat "
                "forwards)\n",
                budget / 1048576.0, optimal, dtr, ratio, r.evictions, r.rematerialized_forwards);
    ++compared;
  }
  EXPECT_GT(compared, 0);
  // A fine scan, since the greedy choices are not monotone in the budget and the spread above can
  // miss the worst budgets. There the 1.3 bar is NOT met everywhere: at 3 of 400 budgets (211-214
  // MiB, every_k's peak) DTR reruns 4 block forwards where optimal reruns 3, ratio 1.33. Before
  // inputs whose producer's rerun brings them back were free to evict (dtr.h), it missed at 8 (also
  // at 215-217, 641-643 MiB, and 3 for 2 at 689 MiB, ratio 1.5). What is asserted is what was measured.
  double worst = 0;
  int64_t worst_budget = 0;
  int over = 0, scanned = 0;
  for (int k = 0; k <= 400; ++k) {
    const int64_t budget = rotor_least + (none.peak_bytes - rotor_least) * k / 400;
    const double optimal = memory::simulate(chain, memory::optimal_schedule(chain, budget)).time - none.time;
    const memory::DtrRun r = memory::dtr_run(chain, budget);
    if (!r.fits || optimal <= 0) continue;
    ++scanned;
    const double ratio = (r.time - none.time) / optimal;
    over += ratio > 1.3 ? 1 : 0;
    if (ratio > 1.3) {
      std::printf("  above the bar at %.1f MiB: optimal reruns %.3g, DTR %.3g (ratio %.3f)\n", budget / 1048576.0,
                  optimal, r.time - none.time, ratio);
    }
    if (ratio > worst) worst = ratio, worst_budget = budget;
  }
  std::printf("  scan of %d budgets: worst ratio %.3f at %.1f MiB; above 1.3 at %d\n", scanned, worst,
              worst_budget / 1048576.0, over);
  EXPECT_GT(scanned, 300);
  EXPECT_LE(worst, 4.0 / 3 + 1e-9);
  EXPECT_LE(over, 3);
}

// With each block's rebuildable part (its norm outputs and MLP activation) a tensor of its own, DTR
// evicts those first (cheap to rebuild, large), keeping blocks selectively where Rotor's whole-unit
// schedule reruns them: at budgets between full recomputation's peak and none's, on a 4-block GPT-2
// of the 124M width (B 4, T 256), its extra compute stays within 1.3 times Checkmate's, which plans
// over the same parts (memory/remat/chain_checkmate.h), and its peak within the budget.
TEST(DtrChain, EvictsRebuildablePartsFirstAndStaysNearCheckmate) {
  config::ModelConfig model = config::gpt2_124m();
  model.n_layer = 4;
  const int B = 4, T = 256;
  const exec::StagePlan plan = exec::even_stages(model.n_layer + 2, 1);
  const std::vector<memory::ChainUnit> chain =
      exec::stage_chain(model, plan.stages.front(), B, T, false, exec::nominal_unit_times(model, B, T));
  const int n = static_cast<int>(chain.size());
  const memory::ChainSimulation none = memory::simulate(chain, memory::none_schedule(n));
  const int64_t full = memory::simulate(chain, memory::full_schedule(n)).peak_bytes;
  int selective = 0;
  for (int k = 1; k <= 3; ++k) {
    const int64_t budget = full + (none.peak_bytes - full) * k / 4;
    const memory::DtrRun r = memory::dtr_run(chain, budget);
    ASSERT_TRUE(r.fits) << r.failure;
    const memory::ChainSimulation sim = memory::simulate(chain, r.schedule);
    EXPECT_LE(sim.peak_bytes, budget);
    const memory::remat::ChainCheckmate checkmate = memory::remat::checkmate_chain_schedule(chain, budget, {.time_limit_s = 60});
    ASSERT_TRUE(checkmate.found);
    const double dtr = sim.time - none.time;
    const double optimal = memory::simulate(chain, checkmate.schedule).time - none.time;
    const double rotor = memory::simulate(chain, memory::optimal_schedule(chain, budget)).time - none.time;
    bool keeps_selectively = false;
    for (const memory::ChainOp& op : r.schedule.forward) keeps_selectively |= op.keep == memory::Keep::Selective;
    selective += keeps_selectively;
    std::printf("  budget %7.1f MiB: extra compute Checkmate %.4g, DTR %.4g (ratio %.3f), Rotor %.4g; DTR %s\n",
                budget / 1048576.0, optimal, dtr, optimal > 0 ? dtr / optimal : 0.0, rotor,
                keeps_selectively ? "keeps blocks selectively" : "keeps no block selectively");
    EXPECT_LE(dtr, 1.3 * optimal + 1e-9 * none.time) << "budget " << budget;
  }
  EXPECT_GE(selective, 2);
}
