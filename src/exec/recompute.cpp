#include "exec/recompute.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "exec/program_memory.h"
#include "memory/dtr.h"
#include "memory/optimal.h"
#include "memory/remat/chain_checkmate.h"
#include "memory/unit_chain.h"
#include "schedule/generators.h"

namespace tessera::exec {

namespace {

int64_t embedding_bytes(const config::ModelConfig& model, int B, int T) {
  return config::unit_activation_bytes(model, B, T).front().own;
}

}  // namespace

UnitTimes nominal_unit_times(const config::ModelConfig& c, int B, int T) {
  const double N = double(B) * T, C = c.n_embd, F = c.ffn(), V = c.vocab_size, W3 = c.qkv_dim();
  const double mlp = c.gated_mlp() ? 3 * C * F : 2 * C * F;
  const double block = 2 * N * ((W3 + C) * C + mlp) + 4 * N * T * C;  // projections, MLP, QKᵀ and AV
  UnitTimes t;
  t.forward.push_back(N * C);  // a lookup: memory-bound, small
  for (int l = 0; l < c.n_layer; ++l) t.forward.push_back(block);
  t.forward.push_back(2 * N * C * V);
  for (double f : t.forward) t.backward.push_back(2 * f);
  t.rebuild.assign(t.forward.size(), 0.0);
  for (int l = 0; l < c.n_layer; ++l) t.rebuild[static_cast<size_t>(l) + 1] = config::rebuild_flops(c, l, B, T);
  return t;
}

UnitTimes measure_unit_times(nn::GPT& model, nn::ParameterAccess& params, MemoryAccountant& memory, int B, int T) {
  using Clock = std::chrono::steady_clock;
  std::vector<int32_t> zeros(static_cast<size_t>(B) * static_cast<size_t>(T), 0);
  const nn::GPT::Microbatch mb{nn::token_tensor(zeros.data(), B, T), nn::token_tensor(zeros.data(), B, T), 0.0f};
  nn::StepContext step{memory, params};
  constexpr int kRuns = 3;
  std::vector<std::vector<double>> runs(static_cast<size_t>(model.num_units()));
  for (int run = 0; run <= kRuns; ++run) {  // run 0 warms caches and the allocator up
    Tensor x;
    for (int u = 0; u < model.num_units(); ++u) {
      nn::GPT::UnitCtx ctx;
      const auto t0 = Clock::now();
      nn::GPT::UnitOutput out = model.forward_unit(step, u, ctx, x, mb);
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (run > 0) runs[static_cast<size_t>(u)].push_back(seconds);
      x = out.y;
    }
  }
  const UnitTimes nominal = nominal_unit_times(model.config(), B, T);
  UnitTimes t;
  for (size_t u = 0; u < runs.size(); ++u) {
    std::vector<double>& r = runs[u];
    std::sort(r.begin(), r.end());
    t.forward.push_back(r[r.size() / 2]);
    t.backward.push_back(2 * r[r.size() / 2]);
    t.rebuild.push_back(t.forward.back() * nominal.rebuild[u] / nominal.forward[u]);
  }
  return t;
}

std::vector<memory::ChainUnit> stage_chain(const config::ModelConfig& model, const StagePlan::Stage& stage, int B,
                                           int T, bool selective, const UnitTimes& times, int tp, bool sp,
                                           DType activations) {
  const std::vector<config::UnitActivationBytes> bytes = config::unit_activation_bytes(model, B, T, tp, sp, activations);
  std::vector<int> units;
  for (int u = stage.chain_first(); u < stage.last; ++u) units.push_back(u);
  // A stage without the head sends its last block's output on.
  return memory::chain_of_units(bytes, units, selective, times.forward, times.backward, times.rebuild,
                                stage.last < model.n_layer + 2);
}

namespace {

// The activation peak of one microbatch through `plan` (one stage), walked with the interpreter's
// rules, offloading's included.
int64_t walked_peak(const StagePlan& plan, const config::ModelConfig& model, int B, int T, int tp, bool sp,
                    DType activations) {
  config::ParallelLayout one;
  one.micro_batch = B;
  one.global_batch = B;
  const Program program = lower_training(pipeline::make_schedule(one), 0, plan);
  return predict_program_memory(program, model, B, T, tp, sp, activations).peak;
}

double recompute_time(std::span<const memory::ChainUnit> chain, const memory::ChainSchedule& schedule) {
  double t = 0;
  for (const memory::ChainOp& op : schedule.backward) {
    if (op.is_forward()) t += chain[static_cast<size_t>(op.unit)].forward_time;
  }
  return t;
}

// Offloading the first k chain units of the one stage, k = 0 (none) upward; for each, the largest
// budget handed to the recompute DP whose schedule's walked peak fits `budget`, found by bisection
// (the walk, not the DP's chain, knows what offloading frees). The cheapest choice in recomputed
// forwards plus disk time beyond what the step's compute hides wins; ties keep fewer offloads.
JointPlanChoice plan_jointly(StagePlan& plan, const config::ModelConfig& model, int B, int T, const RecomputeOptions& options,
                             std::span<const memory::ChainUnit> chain, int64_t chain_budget, int tp, bool sp,
                             DType activations) {
  StagePlan::Stage& stage = plan.stages.front();
  const int head = model.n_layer + 1;
  const int64_t lowest = memory::minimum_budget(chain);
  const int64_t highest = memory::simulate(chain, memory::plan_recompute(config::RecomputePolicy::None, chain, 1, 0)).peak_bytes;
  double compute = 0;
  for (const memory::ChainUnit& u : chain) compute += u.forward_time + u.backward_time;
  const std::vector<config::UnitActivationBytes> bytes = config::unit_activation_bytes(model, B, T, tp, sp, activations);
  const double disk = options.disk_write_bytes_per_second > 0 && options.disk_read_bytes_per_second > 0
                          ? 1.0 / options.disk_write_bytes_per_second + 1.0 / options.disk_read_bytes_per_second
                          : 0.0;
  JointPlanChoice best;
  double best_cost = -1;
  memory::ChainSchedule best_schedule;
  std::vector<int> best_offloaded;
  for (int k = 0; stage.chain_first() + k <= std::min(stage.last - 1, head - 1); ++k) {
    if (k > 0 && disk == 0) break;  // a disk of unknown speed is not offloaded to
    std::vector<int> offloaded;
    int64_t moved = 0;
    for (int u = stage.chain_first(); u < stage.chain_first() + k; ++u) {
      offloaded.push_back(u);
      moved += bytes[static_cast<size_t>(u)].own + bytes[static_cast<size_t>(u - 1)].output;
    }
    stage.offloaded = offloaded;
    const auto fits = [&](int64_t dp_budget, memory::ChainSchedule& schedule) {
      schedule = memory::optimal_schedule(chain, dp_budget);
      stage.recompute = schedule;
      return walked_peak(plan, model, B, T, tp, sp, activations) <= options.budget_bytes;
    };
    // The largest DP budget that fits, between the least one and none's peak: a larger budget
    // recomputes less and keeps more.
    memory::ChainSchedule schedule, trial;
    const int64_t start = std::clamp(chain_budget, lowest, highest);
    int64_t lo = 0;
    if (fits(start, trial)) {
      lo = start;
    } else if (fits(lowest, trial)) {
      lo = lowest;
    } else {
      continue;
    }
    int64_t hi = highest;
    if (fits(hi, trial)) {
      lo = hi;
    } else {
      while (hi - lo > std::max<int64_t>(1, (highest - lowest) / 256)) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (fits(mid, trial)) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
    }
    fits(lo, schedule);
    const double recompute = recompute_time(chain, schedule);
    const double io = static_cast<double>(moved) * disk;
    const double exposed = std::max(0.0, io - compute);
    const double cost = recompute + exposed;
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = {k, recompute, exposed, walked_peak(plan, model, B, T, tp, sp, activations)};
      best_schedule = schedule;
      best_offloaded = offloaded;
    }
  }
  TS_CHECK(best_cost >= 0, "memory.activation_budget_mb = {:.2f} is below what this model needs with every unit "
           "offloaded and recomputed for a microbatch of {} × {}; raise the budget or lower train.micro_batch_size",
           static_cast<double>(options.budget_bytes) / 1048576.0, B, T);
  stage.recompute = best_schedule;
  stage.offloaded = best_offloaded;
  return best;
}

// Checkmate's schedule of one stage under `budget` (the stage's chain), on the FLOP model's times scaled so
// the largest is 1: the solver's gap is absolute, and FLOP counts run to 1e12.
memory::remat::ChainCheckmate plan_checkmate(const config::ModelConfig& model, const StagePlan::Stage& stage, int B,
                                             int T, const RecomputeOptions& options, int64_t budget, int64_t outside,
                                             int tp, bool sp, DType activations) {
  std::vector<memory::ChainUnit> chain =
      stage_chain(model, stage, B, T, false, nominal_unit_times(model, B, T), tp, sp, activations);
  double longest = 0;
  for (const memory::ChainUnit& u : chain) longest = std::max({longest, u.forward_time, u.backward_time});
  for (memory::ChainUnit& u : chain) {
    u.forward_time /= longest;
    u.backward_time /= longest;
    u.rebuild_time /= longest;
  }
  memory::remat::ChainCheckmate plan = memory::remat::checkmate_chain_schedule(
      chain, budget, {.time_limit_s = options.solver_seconds, .cache_dir = options.solver_cache_dir});
  const double mib = 1048576.0;
  TS_CHECK(plan.found,
           "memory.activation_budget_mb = {:.2f} is below the {:.2f} MiB memory.recompute = \"checkmate\" needs at "
           "the least for a microbatch of {} × {} ({}); raise the budget or lower train.micro_batch_size",
           static_cast<double>(options.budget_bytes) / mib, static_cast<double>(plan.least_budget + outside) / mib, B,
           T,
           plan.status == memory::remat::SolveStatus::Infeasible
               ? std::string("the solver proved that no schedule fits")
               : fmt::format("the solver found no schedule that fits within memory.solver_seconds = {}",
                             options.solver_seconds));
  return plan;
}

}  // namespace

void plan_recompute(StagePlan& plan, const config::ModelConfig& model, int B, int T, const RecomputeOptions& options,
                    const UnitTimes& times, int tp, bool sp, DType activations) {
  if (options.offload == ActivationOffloadMode::Auto) {
    // The joint plan is the optimal policy's dynamic program; DTR decides at run time and has none.
    TS_CHECK(options.policy == config::RecomputePolicy::Optimal && plan.stages.size() == 1,
             "memory.offload_activations = \"auto\" plans offloading together with memory.recompute = \"optimal\" "
             "for one pipeline stage (it is {}); use \"nvme\" under pipelines or with other policies",
             config::recompute_policy_name(options.policy));
    StagePlan::Stage& stage = plan.stages.front();
    stage.selective = false;
    const std::vector<memory::ChainUnit> chain = stage_chain(model, stage, B, T, false, times, tp, sp, activations);
    plan_jointly(plan, model, B, T, options, chain, options.budget_bytes - embedding_bytes(model, B, T), tp, sp,
                 activations);
    return;
  }
  const bool selective = options.policy == config::RecomputePolicy::Selective;
  for (StagePlan::Stage& stage : plan.stages) {
    const int every_k = options.every_k > 0 ? options.every_k : config::default_every_k(stage.blocks(model.n_layer));
    const std::vector<memory::ChainUnit> chain = stage_chain(model, stage, B, T, selective, times, tp, sp, activations);
    int64_t budget = options.budget_bytes;
    if (stage.first == 0) budget -= embedding_bytes(model, B, T);
    stage.selective = selective;
    const int64_t outside = stage.first == 0 ? embedding_bytes(model, B, T) : 0;
    if (options.policy == config::RecomputePolicy::Optimal) {
      const int64_t minimum = memory::minimum_budget(chain) + outside;
      TS_CHECK(options.budget_bytes >= minimum,
               "memory.activation_budget_mb = {:.2f} is below the {:.2f} MiB this model needs at the least for a "
               "microbatch of {} × {}; raise the budget or lower train.micro_batch_size",
               static_cast<double>(options.budget_bytes) / 1048576.0, static_cast<double>(minimum) / 1048576.0, B, T);
    }
    if (options.policy == config::RecomputePolicy::Dtr && !memory::dtr_run(chain, budget).fits) {
      // DTR's least budget is its own (above optimal's), and its greedy choices are not monotone in
      // the budget: name the least and, when they differ, the next one above this budget.
      const int64_t least = memory::dtr_minimum_budget(chain) + outside;
      const int64_t next = memory::dtr_minimum_budget(chain, budget) + outside;
      const double mib = 1048576.0;
      const std::string why =
          next == least
              ? std::string("below it DTR runs out of tensors to evict")
              : fmt::format("but DTR's greedy evictions are not monotone in the budget and run out of tensors to "
                            "evict at this one; the next budget up it meets is {:.2f} MiB",
                            static_cast<double>(next) / mib);
      TS_FAIL("memory.activation_budget_mb = {:.2f} is {} the {:.2f} MiB memory.recompute = \"dtr\" needs at the least "
              "for a microbatch of {} × {}: {}; raise the budget, lower train.micro_batch_size, or use "
              "memory.recompute = \"optimal\", which needs {:.2f} MiB",
              static_cast<double>(options.budget_bytes) / mib, next == least ? "below" : "above",
              static_cast<double>(least) / mib, B, T, why,
              static_cast<double>(memory::minimum_budget(chain) + outside) / mib);
    }
    stage.checkmate.reset();
    if (options.policy == config::RecomputePolicy::Checkmate) {
      stage.checkmate = plan_checkmate(model, stage, B, T, options, budget, outside, tp, sp, activations);
      stage.recompute = stage.checkmate->schedule;
      stage.checkmate->schedule = {};
    } else {
      stage.recompute = memory::plan_recompute(options.policy, chain, every_k, budget);
    }
    // Offloading takes what the units keep; the embedding's token ids stay (a few bytes).
    stage.offloaded.clear();
    if (options.offload == ActivationOffloadMode::Nvme) {
      const int head = model.n_layer + 1;
      for (int u = stage.chain_first(); u < stage.last; ++u) {
        if (u != head) stage.offloaded.push_back(u);
      }
    }
  }
}

ActivationOffloadMode parse_activation_offload(std::string_view name) {
  if (name == "none") return ActivationOffloadMode::None;
  if (name == "nvme") return ActivationOffloadMode::Nvme;
  if (name == "auto") return ActivationOffloadMode::Auto;
  TS_FAIL("memory.offload_activations = \"{}\" is not known; use \"none\", \"nvme\" or \"auto\"", name);
}

ActivationPrediction predict_activations(const StagePlan& plan, const config::ModelConfig& model, int B, int T,
                                         int alive, int tp, bool sp, DType activations) {
  TS_CHECK(plan.stages.size() == 1, "activation prediction covers a rank holding the whole model as one stage");
  const StagePlan::Stage& stage = plan.stages.front();
  const std::vector<memory::ChainUnit> chain =
      stage_chain(model, stage, B, T, stage.selective, nominal_unit_times(model, B, T), tp, sp, activations);
  const memory::ChainSimulation sim = memory::simulate(chain, stage.recompute);
  const int64_t tokens = embedding_bytes(model, B, T);
  ActivationPrediction p;
  p.per_microbatch_peak = tokens + sim.peak_bytes;
  p.per_microbatch_after_forward = tokens + sim.after_forward_bytes;
  p.peak = int64_t{alive - 1} * p.per_microbatch_after_forward + p.per_microbatch_peak;
  return p;
}

}  // namespace tessera::exec
