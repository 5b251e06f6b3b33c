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

using namespace tessera;

// At eight budgets spread from the optimal solver's least to none's peak, DTR's schedule fits (or,
// below DTR's own least budget, is refused), is valid, recomputes no less than the optimal schedule,
// and at most 1.3 times as much (extra compute over none's, FLOP-model times). The measured ratios
// are printed; docs/benchmarks.md reports them.
TEST(DtrChain, Gpt2SmallExtraComputeAgainstOptimal) {
  const config::ModelConfig model = config::gpt2_124m();
  const int B = 4, T = 256;
  const exec::StagePlan plan = exec::even_stages(model.n_layer + 2, 1);
  const std::vector<memory::ChainUnit> chain =
      exec::stage_chain(model, plan.stages.front(), B, T, false, exec::nominal_unit_times(model, B, T));
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
}
