// Recomputation under data parallelism and ZeRO 0–3, under mpirun (2 and 4 ranks), with dropout:
//  - every policy (full, every_k, selective, optimal) gives bitwise the losses, gradient norms and
//    parameters of no recomputation on the same layout, and matches the single-process reference
//    (losses within 1e-5 relative, parameters within 1e-4);
//  - the measured activation peak is the plan's prediction, exactly;
//  - ZeRO-3's gathers follow the program: under recomputation the 'comm' peak stays within the
//    bound of two gathered units plus the gradient buckets (nothing is prefetched that does not run);
//  - a non-finite gradient on one rank makes every rank skip the same step.
// A plain main: every failed check prints its rank; the ranks agree on the count of failures.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "../common/rank_checks.h"
#include "dist/mpi_runtime.h"
#include "exec/recompute.h"
#include "parallel/rank_sum.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

using Checks = tessera::testing::RankChecks;

std::string describe(const ParityCase& c) {
  return fmt::format("{} {} zero{} {} {}{}", config::architecture_name(c.model.arch),
                     config::activation_name(c.model.mlp_activation()), c.zero_stage,
                     config::schedule_name(c.schedule),
                     config::recompute_policy_name(c.recompute.policy),
                     c.recompute.policy == config::RecomputePolicy::EveryK ? fmt::format(" k={}", c.recompute.every_k)
                                                                           : std::string());
}

void check_same_bits(const RunRecord& got, const RunRecord& want, const std::string& what, Checks& t) {
  bool same = got.params.size() == want.params.size() &&
              std::memcmp(got.params.data(), want.params.data(), sizeof(float) * want.params.size()) == 0;
  for (size_t s = 0; s < want.steps.size(); ++s) {
    same = same && got.steps[s].loss == want.steps[s].loss && got.steps[s].grad_norm == want.steps[s].grad_norm;
  }
  t.expect(same, fmt::format("{}: losses, norms or parameters differ from no recomputation on the same layout", what));
}

void check_memory(const RunRecord& run, const std::string& what, Checks& t) {
  for (const StepRecord& s : run.steps) {
    t.expect(s.predicted_activations > 0 &&
                 static_cast<int64_t>(s.memory.peak_of(MemoryTag::Activations)) == s.predicted_activations,
             fmt::format("{}: activation peak {} bytes, predicted {}", what, s.memory.peak_of(MemoryTag::Activations),
                         s.predicted_activations));
    t.expect(s.memory.peak_of(MemoryTag::Comm) <= run.comm_bound,
             fmt::format("{}: comm peak {} over the bound {}", what, s.memory.peak_of(MemoryTag::Comm), run.comm_bound));
  }
}

void check_skip_everywhere(int stage, dist::Communicator& world, Checks& t) {
  MemoryAccountant memory;
  nn::GPT model(gpt2_odd_config(), memory, 5);
  parallel::EngineOptions options;
  options.layout.dp = world.size();
  options.layout.zero_stage = stage;
  options.layout.global_batch = world.size();
  options.seq_len = 16;
  const dist::Mesh mesh(world, options.layout);
  parallel::TrainingEngine engine(model, memory, &mesh, options);
  // Rank 0 alone sees a non-finite gradient, in the second step.
  PoisonGradient poison(engine.ownership(), model.parameters().get("embed.positions.weight"), 2, world.rank() == 0);
  engine.transforms().add(exec::TransformSlot::Observer, poison);
  std::vector<int32_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[static_cast<size_t>(i)] = (i * 7 + world.rank()) % 61;
  const exec::MicrobatchInput mb{{nn::token_tensor(tokens.data(), 1, 16), nn::token_tensor(tokens.data(), 1, 16),
                                  1.0f / 16},
                                 world.rank()};
  std::vector<double> skipped;
  for (int step = 0; step < 3; ++step) {
    skipped.push_back(engine.train_step(std::span(&mb, 1), {}, 1e-3f, 1.0).skipped ? 1.0 : 0.0);
  }
  const std::vector<double> total = parallel::sum_over_ranks(&world, skipped);
  const double n = world.size();
  t.expect(total[0] == 0 && total[1] == n && total[2] == 0,
           fmt::format("zero{}: ranks skipping each step: {}, {}, {} of {} (want 0, all, 0)", stage, total[0], total[1],
                       total[2], n));
  t.expect(engine.optimizer().steps_taken() == 2, fmt::format("zero{}: the optimizer took {} steps, want 2", stage,
                                                              engine.optimizer().steps_taken()));
  engine.transforms().remove(exec::TransformSlot::Observer);
}

// A Checkmate budget, for microbatches [B, T] of `model`, at which its schedule keeps some blocks
// selectively (rebuilding their norm outputs and MLP activation in the backward), or 0 if none of the
// budgets tried gives one.
int64_t budget_where_checkmate_keeps_selectively(const config::ModelConfig& model, int B, int T) {
  const int units = model.n_layer + 2;
  const exec::UnitTimes times = exec::nominal_unit_times(model, B, T);
  const auto peak = [&](const exec::RecomputeOptions& options) {
    exec::StagePlan plan = exec::even_stages(units, 1);
    exec::plan_recompute(plan, model, B, T, options, times);
    return std::pair{plan, exec::predict_activations(plan, model, B, T, 1).peak};
  };
  const int64_t none = peak({}).second, full = peak({.policy = config::RecomputePolicy::Full}).second;
  for (int k = 2; k >= 1; --k) {
    const int64_t budget = full + (none - full) * k / 4;
    const exec::StagePlan plan = peak({.policy = config::RecomputePolicy::Checkmate, .budget_bytes = budget}).first;
    for (const memory::ChainOp& op : plan.stages.front().recompute.forward) {
      if (op.keep == memory::Keep::Selective) return budget;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, Checks& t) {
    // Squared ReLU on GPT-2: selective recomputation rebuilds another activation from the same pre.
    config::ModelConfig relu2 = gpt2_odd_config();
    relu2.activation = config::Activation::Relu2;
    for (const config::ModelConfig& model : {gpt2_odd_config(), llama_config(), relu2}) {
      ParityCase base;
      base.model = model;
      base.model.n_layer = 3;
      base.model.dropout = 0.1f;
      base.micros = 2;
      base.steps = 3;
      base.bucket_bytes = 1024;  // a bucket per unit: reductions interleave with recomputation
      const RunRecord reference = run_reference(base);
      for (int stage = 0; stage <= 3; ++stage) {
        ParityCase none = base;
        none.zero_stage = stage;
        const RunRecord plain = run_data_parallel(none, &world);
        check_matches_reference(plain, reference, describe(none), t);
        check_memory(plain, describe(none), t);
        ParityCase full = none;
        full.recompute.policy = config::RecomputePolicy::Full;
        const int64_t full_peak = run_data_parallel(full, &world).steps[0].predicted_activations;
        std::vector<ParityCase> policies = {full};
        ParityCase every = none;
        every.recompute = {config::RecomputePolicy::EveryK, 2, 0};
        ParityCase selective = none;
        selective.recompute.policy = config::RecomputePolicy::Selective;
        ParityCase optimal = none;
        optimal.recompute = {config::RecomputePolicy::Optimal, 0,
                             (full_peak + plain.steps[0].predicted_activations) / 2};
        ParityCase dtr = optimal;
        dtr.recompute.policy = config::RecomputePolicy::Dtr;
        ParityCase checkmate = optimal;
        checkmate.recompute.policy = config::RecomputePolicy::Checkmate;
        // Zero-bubble's split backward: the reducer posts each bucket after the last weight half
        // that writes it, so the gradients are the same bits as with whole backwards.
        ParityCase split = full;
        split.schedule = config::ScheduleKind::ZeroBubbleH1;
        policies.insert(policies.end(), {every, selective, optimal, dtr, checkmate, split});
        for (const ParityCase& c : policies) {
          const RunRecord run = run_data_parallel(c, &world);
          check_same_bits(run, plain, describe(c), t);
          check_matches_reference(run, reference, describe(c), t);
          if (c.schedule != config::ScheduleKind::ZeroBubbleH1) check_memory(run, describe(c), t);
          if (t.rank == 0) fmt::print("{}: checked\n", describe(c));
        }
      }
    }
    for (int stage : {0, 1, 3}) check_skip_everywhere(stage, world, t);
    // Checkmate keeping some blocks selectively and recomputing none (its graph holds each block's
    // rebuildable part as a node of its own), under ZeRO-3: bitwise the run without recomputation, the
    // measured activation peak the predicted one. Blocks wide against the vocabulary make the peak.
    ParityCase wide;
    wide.model = gpt2_odd_config();
    wide.model.n_layer = 6;
    wide.model.n_embd = 48;
    wide.model.dropout = 0.1f;
    wide.micros = 2;
    wide.steps = 3;
    wide.zero_stage = 3;
    const int64_t budget = budget_where_checkmate_keeps_selectively(
        wide.model, wide.global_batch / world.size() / wide.micros, wide.seq_len);
    t.expect(budget > 0, "Checkmate keeps no block selectively at the budgets tried");
    if (budget > 0) {
      const RunRecord plain = run_data_parallel(wide, &world);
      ParityCase checkmate = wide;
      checkmate.recompute = {.policy = config::RecomputePolicy::Checkmate, .budget_bytes = budget};
      const RunRecord run = run_data_parallel(checkmate, &world);
      check_same_bits(run, plain, describe(checkmate) + " (selective keeps)", t);
      check_matches_reference(run, run_reference(wide), describe(checkmate), t);
      check_memory(run, describe(checkmate), t);
      if (t.rank == 0) fmt::print("{} with selective keeps at {} bytes: checked\n", describe(checkmate), budget);
    }
  });
}
