// ZeRO-Offload's delayed parameter update under mpirun (2 ranks) against a one-process loop that
// keeps the two weight copies by hand and shares no code with the engine's delayed path: steps up
// to N take their gradient at W(t), later ones at W(t - 1), each applied by AdamW to W(t). The
// engine runs it on one process, over dp 2 with ZeRO 0-3 and over a pipeline of 2, GPT-2 (tied
// embedding) and Llama, dropout and clipping on. Losses and gradient norms within 1e-5 relative,
// parameters within 1e-4 after 6 steps; and the delay must matter on these cases, or agreeing
// with the reference would not tell it from the synchronous run.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "../common/rank_checks.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

void check_differs_from_synchronous(const RunRecord& run, const ParityCase& c, const std::string& what,
                                    RankChecks& t) {
  const RunRecord synchronous = run_reference(c);
  double worst = 0;
  for (size_t i = 0; i < std::min(run.params.size(), synchronous.params.size()); ++i) {
    worst = std::max(worst, std::abs(double(run.params[i]) - synchronous.params[i]));
  }
  t.expect(worst > 1e-4, fmt::format("{}: parameters within {:.3g} of the synchronous run: the test cannot tell them "
                                     "apart", what, worst));
  // Before the first stale gradient the two are the same run.
  for (int64_t i = 0; i <= c.delayed_update_after && i < static_cast<int64_t>(run.steps.size()); ++i) {
    const double want = synchronous.steps[static_cast<size_t>(i)].loss, got = run.steps[static_cast<size_t>(i)].loss;
    t.expect(std::abs(got - want) <= 1e-5 * std::abs(want),
             fmt::format("{}: step {} loss {} but the synchronous run's is {}", what, i + 1, got, want));
  }
}

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, RankChecks& t) {
    const int p = world.size();
    for (const config::ModelConfig& model : {gpt2_odd_config(), llama_config()}) {
      const std::string arch(config::architecture_name(model.arch));
      ParityCase c;
      c.model = model;
      c.model.n_layer = p;
      c.model.dropout = 0.1f;
      c.micros = 2;
      c.global_batch = 2 * p;
      c.steps = 6;
      c.delayed_update_after = 2;
      const RunRecord reference = run_reference_delayed_update(c);

      const std::string alone = fmt::format("delayed update {} one process", arch);
      const RunRecord one = run_parallel(c, nullptr);
      check_matches_reference(one, reference, alone, t);
      check_differs_from_synchronous(one, c, alone, t);
      if (t.rank == 0) fmt::print("{}: checked\n", alone);

      for (int stage : {0, 1, 2, 3}) {
        ParityCase z = c;
        z.zero_stage = stage;
        const std::string what = fmt::format("delayed update {} dp{} zero{}", arch, p, stage);
        check_matches_reference(run_data_parallel(z, &world), reference, what, t);
        if (t.rank == 0) fmt::print("{}: checked\n", what);
      }
      const std::string piped = fmt::format("delayed update {} pp{}", arch, p);
      check_matches_reference(run_pipelined(c, world), reference, piped, t);
      if (t.rank == 0) fmt::print("{}: checked\n", piped);
    }
  });
}
