// PipeDream-2BW under mpirun (2 and 4 ranks): the pipelined run, which stashes the previous weight
// version and drains only between engine calls, against references of the same semantics that
// share no code with the pipelined path.
//
// The uniform delay (TwoBWVersions::Delayed: step t's gradient at W(max(0, t - 1)), applied by
// AdamW to W(t)): against a one-process loop keeping the two weight copies by hand, and the engine
// on one process (pp = 1, "2bw", all five steps in one call). GPT-2 with a tied embedding (its
// gradient summed between the first and last stage at every step) and Llama untied, m = p and
// 2p + 1, dropout and clipping on; with 4 ranks also dp 2 × pp 2; also dp alone (pp = 1) with
// ZeRO 0-2.
//
// The newest version (TwoBWVersions::Newest, the default: only the microbatches a stage starts
// before its previous step read the older weights): against a one-process loop that assembles
// each microbatch's weights stage by stage, on untied GPT-2 and Llama with given stage sizes, m = p
// and 2p + 1, and with 4 ranks dp 2 × pp 2.
//
// Losses and gradient norms within 1e-5 relative, parameters within 1e-4 after 5 steps. Each
// rank's stash is one copy of the parameters it runs, under its own memory tag.
// A plain main: every failed check prints its rank; the ranks agree on the count of failures.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "../common/rank_checks.h"
#include "dist/mesh.h"
#include "dist/mpi_runtime.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

using Checks = tessera::testing::RankChecks;

std::string describe(const ParityCase& c, int dp, int pp) {
  return fmt::format("2bw {} L{} dp{} pp{} m{}", config::architecture_name(c.model.arch), c.model.n_layer, dp, pp,
                     c.micros);
}

// The delayed gradient must matter on these cases, or agreeing with the 2BW references would not
// tell 2BW from a synchronous schedule.
void check_differs_from_synchronous(const RunRecord& run, const ParityCase& c, const std::string& what, Checks& t) {
  const RunRecord synchronous = run_reference(c);
  double worst = 0;
  for (size_t i = 0; i < std::min(run.params.size(), synchronous.params.size()); ++i) {
    worst = std::max(worst, std::abs(double(run.params[i]) - synchronous.params[i]));
  }
  t.expect(worst > 1e-4, fmt::format("{}: parameters within {:.3g} of the synchronous run: the test cannot tell them "
                                     "apart", what, worst));
}

void check_stash(const RunRecord& run, const std::string& what, int rank, Checks& t) {
  t.expect(run.weight_stash_bytes > 0 && run.weight_stash_bytes == run.optimizer_param_bytes,
           fmt::format("{} (rank {}): the weight stash holds {} bytes; this rank's parameters are {} bytes", what, rank,
                       run.weight_stash_bytes, run.optimizer_param_bytes));
  for (const StepRecord& s : run.steps) {
    t.expect(s.memory.peak_of(MemoryTag::WeightStash) == run.weight_stash_bytes,
             fmt::format("{} (rank {}): the stash peaked at {} bytes, more than its one copy of {}", what, rank,
                         s.memory.peak_of(MemoryTag::WeightStash), run.weight_stash_bytes));
  }
}

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, Checks& t) {
    const int p = world.size();
    for (const config::ModelConfig& model : {gpt2_odd_config(), llama_config()}) {
      for (int m : {p, 2 * p + 1}) {
        ParityCase c;
        c.model = model;
        c.model.n_layer = m == p ? p : p + 1;  // blocks that divide the stages, and blocks that do not
        c.model.dropout = 0.1f;
        c.schedule = config::ScheduleKind::PipeDream2BW;
        c.micros = m;
        c.global_batch = 2 * m;
        c.steps = 5;
        // Drained after the second step: the third batch must still read the second's weights.
        c.steps_per_call = {2, 3};
        const std::string what = describe(c, 1, p);
        const RunRecord run = run_pipelined(c, world);
        check_matches_reference(run, run_reference_2bw(c), what + " vs the hand-written reference", t);
        ParityCase one_call = c;
        one_call.steps_per_call = {5};
        check_matches_reference(run, run_parallel(one_call, nullptr), what + " vs the engine at pp 1", t);
        check_stash(run, what, world.rank(), t);
        if (m == p) check_differs_from_synchronous(run, c, what, t);
        if (t.rank == 0) fmt::print("{}: checked\n", what);
      }
    }
    // The newest version: at pp = p only the first p - 1 - s microbatches of a batch read the
    // older weights on stage s.
    for (config::ModelConfig model : {gpt2_odd_config(), llama_config()}) {
      model.tied_embeddings = false;
      for (int m : {p, 2 * p + 1}) {
        ParityCase c;
        c.model = model;
        c.model.n_layer = p + 1;
        c.model.dropout = 0.1f;
        c.schedule = config::ScheduleKind::PipeDream2BW;
        c.two_bw_versions = pipeline::TwoBWVersions::Newest;
        c.stage_layers.assign(static_cast<size_t>(p), 1);
        c.stage_layers.back() = 2;
        c.micros = m;
        c.global_batch = 2 * m;
        c.steps = 5;
        c.steps_per_call = {2, 3};
        const std::string what = describe(c, 1, p) + " newest";
        const RunRecord run = run_pipelined(c, world);
        check_matches_reference(run, run_reference_2bw_newest(c, 1, p), what + " vs the hand-written reference", t);
        check_stash(run, what, world.rank(), t);
        check_differs_from_synchronous(run, c, what, t);
        if (t.rank == 0) fmt::print("{}: checked\n", what);
      }
    }
    // Data parallelism alone with ZeRO-1 and -2: 2BW at pp 1 with the master and the gradients
    // sharded, the stash a copy of the whole (gathered) parameters.
    for (int stage : {0, 1, 2}) {
      ParityCase c;
      c.model = gpt2_odd_config();
      c.model.dropout = 0.1f;
      c.schedule = config::ScheduleKind::PipeDream2BW;
      c.zero_stage = stage;
      c.micros = 2;
      c.global_batch = 2 * p;
      c.steps = 5;
      c.steps_per_call = {2, 3};
      const std::string what = fmt::format("2bw gpt2 dp{} pp1 zero{}", p, stage);
      const RunRecord run = run_data_parallel(c, &world);
      check_matches_reference(run, run_reference_2bw(c), what + " vs the hand-written reference", t);
      t.expect(run.weight_stash_bytes == static_cast<size_t>(run.numel) * sizeof(float),
               fmt::format("{}: the stash holds {} bytes, not one copy of the model's {} parameters", what,
                           run.weight_stash_bytes, run.numel));
      if (t.rank == 0) fmt::print("{}: checked\n", what);
    }
    if (p == 4) {
      // dp 2 × pp 2: each stage's gradients reduced over its data-parallel group at every step.
      config::ParallelLayout layout;
      layout.dp = 2;
      layout.pp = 2;
      dist::Mesh mesh(world, layout);
      for (const config::ModelConfig& model : {gpt2_odd_config(), llama_config()}) {
        ParityCase c;
        c.model = model;
        c.model.n_layer = 3;
        c.model.dropout = 0.1f;
        c.schedule = config::ScheduleKind::PipeDream2BW;
        c.micros = 3;
        c.global_batch = 12;
        c.steps = 5;
        c.steps_per_call = {3, 2};
        const std::string what = describe(c, 2, 2);
        const RunRecord run = run_parallel(c, &mesh);
        check_matches_reference(run, run_reference_2bw(c), what + " vs the hand-written reference", t);
        check_stash(run, what, world.rank(), t);
        if (t.rank == 0) fmt::print("{}: checked\n", what);
      }
      ParityCase c;
      c.model = llama_config();
      c.model.n_layer = 3;
      c.model.dropout = 0.1f;
      c.schedule = config::ScheduleKind::PipeDream2BW;
      c.two_bw_versions = pipeline::TwoBWVersions::Newest;
      c.stage_layers = {2, 1};
      c.micros = 3;
      c.global_batch = 12;
      c.steps = 5;
      c.steps_per_call = {3, 2};
      const std::string what = describe(c, 2, 2) + " newest";
      const RunRecord run = run_parallel(c, &mesh);
      check_matches_reference(run, run_reference_2bw_newest(c, 2, 2), what + " vs the hand-written reference", t);
      check_stash(run, what, world.rank(), t);
      if (t.rank == 0) fmt::print("{}: checked\n", what);
    }
  }, /*check_sequence=*/false);
}
