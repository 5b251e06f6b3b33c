#include "train/planned_run.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "core/check.h"
#include "data/dataset.h"
#include "kernels/cpu/grad_norm.h"
#include "exec/program.h"
#include "config/workspace_bytes.h"
#include "exec/program_memory.h"
#include "exec/recompute.h"
#include "optim/make_optimizer.h"
#include "schedule/generators.h"
#include "plan/compression_model.h"
#include "plan/engine_memory.h"
#include "plan/model_costs.h"
#include "plan/pipeline_model.h"

namespace tessera::train {

namespace {

// The stages `tessera train` cuts the model into without parallel.stage_layers (the FLOP model's
// balance, parallel::TrainingEngine::split_stages) when they are not the cost model's even split:
// a note saying so, else empty.
std::string uneven_split_note(const RunConfig& c) {
  const int stages = c.parallel.pp * c.parallel.virtual_stages;
  if (stages == 1 || c.model.n_layer % stages != 0) return {};
  const exec::UnitTimes nominal = exec::nominal_unit_times(c.model, c.train.micro_batch_size, c.model.seq_len);
  std::vector<double> costs(nominal.forward.size());
  for (size_t u = 0; u < costs.size(); ++u) costs[u] = nominal.forward[u] + nominal.backward[u];
  const exec::StagePlan run = exec::balanced_stages(costs, stages);
  const std::vector<int64_t> even(static_cast<size_t>(stages), c.model.n_layer / stages);
  const exec::StagePlan planned = exec::stages_of_blocks(c.model.n_layer + 2, even);
  if (exec::describe_stages(run) == exec::describe_stages(planned)) return {};
  return fmt::format("the run balances its stages by the FLOP model as {}, while the cost model takes {} blocks per "
                     "stage ({}), so the stages' memory and time are those of the even split; give "
                     "parallel.stage_layers with {} each to train the split planned here",
                     exec::describe_stages(run), c.model.n_layer / stages, exec::describe_stages(planned),
                     c.model.n_layer / stages);
}

}  // namespace

PlannedRun planned_run(RunConfig c) {
  if (c.vocab_from_data) {
    const std::filesystem::path info = std::filesystem::path(c.data.dir) / "data.json";
    std::error_code ec;
    TS_CHECK(std::filesystem::is_regular_file(info, ec),
             "plan --config: model.vocab_size is not set, and '{}' does not exist to take it from as the trainer "
             "would; prepare the data (tessera data prepare --out {}), point --data.dir at it, or set "
             "--model.vocab_size", info.string(), c.data.dir);
    c.model.vocab_size = static_cast<int>(data::read_dataset_info(c.data.dir).vocab_size);
  }
  c.validate();
  PlannedRun run;
  run.model = c.model;
  plan::Layout& l = run.layout;
  static_cast<config::ParallelLayout&>(l) = c.layout();
  l.recompute = c.memory.recompute;
  l.recompute_every = c.memory.recompute == config::RecomputePolicy::EveryK ? c.memory.recompute_every : 0;
  // The float's shortest decimal, so the layout and its messages say 1.2, not 1.2000000476837158.
  l.activation_budget_mb = config::recompute_takes_budget(l.recompute)
                               ? std::stod(fmt::format("{}", c.memory.activation_budget_mb))
                               : 0.0;
  // bf16 and fp16 hold the same bytes; the cost model's 16-bit format is bf16.
  l.precision = c.precision.compute == "fp32" ? plan::Precision::Fp32 : plan::Precision::Bf16;
  // The engine's attention is tiled: it never stores the T x T scores and runs as one fused kernel.
  l.flash_attention = true;
  l.activations = plan::ActivationAccounting::Engine;
  l.states = plan::StateAccounting::Engine;
  l.bucket_mb = static_cast<double>(c.parallel.bucket_mb);
  l.gradients_to_nvme = c.memory.offload_params == "nvme";
  // 16-bit gradient messages; the default (f32) keeps the precision's element size.
  if (const DType messages = c.precision_options().grad_dtype; messages != DType::F32) {
    l.grad_message_bytes = static_cast<double>(dtype_size(messages));
  }
  // Buckets are reduced as backward completes them, but on the communicator's progress thread,
  // which shares the rank's cores with the compute it would hide behind: not overlapped.
  l.overlap = false;
  l.optimizer = c.optim.kind;
  const config::CompressionOptions compression = c.compression_options();
  l.compression = compression.method;
  l.compression_ratio = compression.ratio;
  l.compression_rank = compression.rank;
  run.split_note = c.parallel.stage_layers.empty() ? uneven_split_note(c) : std::string();
  TS_CHECK(c.parallel.stage_layers.empty() || std::all_of(c.parallel.stage_layers.begin(), c.parallel.stage_layers.end(),
                                                          [&](int64_t b) { return b == c.parallel.stage_layers.front(); }),
           "plan --config: parallel.stage_layers sets uneven pipeline stages, which the cost model does not describe "
           "(it takes model.n_layer / (parallel.pp × parallel.virtual_stages) blocks per stage); give as many blocks "
           "to every stage");
  return run;
}

PredictedMemory predict_memory(const RunConfig& c, const PlannedRun& run) {
  const plan::Layout& l = run.layout;
  const config::ModelConfig& m = run.model;
  const int B = c.train.micro_batch_size, T = m.seq_len;
  const DType compute = c.precision_options().compute;
  // The program of each pipeline rank, as the engine lowers it on the planner's even split.
  const pipeline::Schedule schedule =
      pipeline::make_schedule(c.layout(), {.two_bw_versions = pipeline::parse_two_bw_versions(c.parallel.weight_version)});
  const int stages = l.pp * l.virtual_stages, units = m.n_layer + 2;
  exec::StagePlan split = exec::even_stages(units, stages);
  exec::RecomputeOptions recompute;
  recompute.policy = c.memory.recompute;
  recompute.every_k = c.memory.recompute_every;
  recompute.budget_bytes = static_cast<int64_t>(static_cast<double>(c.memory.activation_budget_mb) * 1048576.0);
  recompute.offload = exec::parse_activation_offload(c.memory.offload_activations);
  recompute.solver_seconds = c.memory.solver_seconds;
  exec::plan_recompute(split, m, B, T, recompute, exec::nominal_unit_times(m, B, T), l.tp, l.sp, compute);
  const std::vector<config::UnitWorkspaceBytes> unit_bytes =
      config::unit_workspace_bytes(m, B, T, l.tp, l.sp, compute, l.ep);
  // A stage that receives gradients posts the next receive ahead (plan::engine_stage_memory): during
  // its forwards, and during the backward of the lowest unit of each of its chunks.
  const int64_t boundary = static_cast<int64_t>(dtype_size(compute)) * B * (T / (l.sp ? l.tp : 1)) * m.n_embd;
  const plan::PipelineModel pipeline = plan::closed_form_pipeline();

  PredictedMemory out;
  for (int rank = 0; rank < l.pp; ++rank) {
    plan::MemoryBreakdown tags = plan::stage_memory(m, l, rank, pipeline);
    const exec::Program program = exec::lower_training(schedule, rank, split);
    const exec::ActivationEncoding encoding = exec::parse_activation_encoding(c.memory.activation_encoding);
    const exec::ProgramMemory activations =
        exec::predict_program_memory(program, m, B, T, l.tp, l.sp, compute, encoding);
    // The cost model's chains keep everything in compute memory as it is; offloading moves some out,
    // and an encoding shrinks what waits for a backward.
    // ZB-H1 keeps what each weight half reads from its input half until it runs, which the
    // program's walk follows and the cost model's count of microbatches in flight does not.
    // Checkmate's schedule is the one solved above; the cost model's chain has a stand-in for it
    // (the cheaper of Rotor's and DTR's), whose peak may differ.
    if (recompute.offload != exec::ActivationOffloadMode::None || encoding != exec::ActivationEncoding::None ||
        l.schedule == config::ScheduleKind::ZeroBubbleH1 || recompute.policy == config::RecomputePolicy::Checkmate) {
      tags.activations = static_cast<double>(activations.peak);
    }
    out.nvme.push_back(static_cast<double>(activations.nvme_peak));
    out.nvme_traffic.push_back(static_cast<double>(activations.offloaded_bytes));
    if (c.memory.offload_optimizer == "nvme") {
      // The state lives in the nvme tier; a step streams it through compute memory three chunks at a
      // time (optim/offloaded_optimizer.h): a bound, as a chunk holds whole parameters and may be a
      // parameter's state larger than the chunk size.
      const double chunk = static_cast<double>(c.memory.offload_chunk_mb) * 1048576.0;
      out.nvme.back() += tags.optimizer;
      out.nvme_optimizer_traffic.push_back(tags.optimizer);
      tags.optimizer = std::min(tags.optimizer, 3.0 * chunk);
    } else {
      out.nvme_optimizer_traffic.push_back(0);
    }
    // Offloaded parameters (ZeRO-3's shard in the nvme tier): in compute memory, the master values of
    // the optimizer's chunks in flight (three at most, in the optimizer step) and, with several
    // ranks, two units' parts of the shard between their read and their gather (in the step's
    // units). Like the state's, a chunk's size is the setting's: one holds whole parameters, so a
    // parameter larger than the chunk comes in whole, above the prediction.
    const bool params_offloaded = c.memory.offload_params == "nvme";
    double params_in_units = 0, params_in_optimizer = 0;
    // Offloaded gradients (ZeRO-3's gradient shard in the nvme tier, parallel/offloaded_gradients.h):
    // in compute memory, the two chunks' gradients the optimizer step holds at once (the one it
    // updates and the next, read ahead); what waits for its write is a bucket, in the comm tag.
    double grads_in_optimizer = 0, grads_in_backward = 0;
    GradientTraffic gradient_traffic;
    if (params_offloaded) {
      const double shard = tags.params;
      out.nvme.back() += shard;
      // The optimizer step reads each chunk's master values with its state and writes them back.
      out.nvme_optimizer_traffic.back() += shard;
      out.nvme_parameter_reads.push_back(sizeof(float) * plan::engine_zero3_gathered_elements(m, l) / l.dp);
      const double chunk = static_cast<double>(c.memory.offload_chunk_mb) * 1048576.0;
      const double state_per_parameter = optim::state_bytes_per_parameter(c.optim);
      const double chunk_values = state_per_parameter > 0 ? sizeof(float) * chunk / state_per_parameter : shard;
      params_in_optimizer = std::min(shard, 3.0 * chunk_values);
      if (l.gradients_to_nvme) {
        const double grads = tags.grads;
        out.nvme.back() += grads;
        // Each microbatch's window writes it; every one after the first reads it back to add.
        const double microbatches = static_cast<double>(c.train.batch_size / c.train.micro_batch_size / l.dp);
        gradient_traffic = {microbatches * grads, (microbatches - 1) * grads, grads};
        grads_in_optimizer = std::min(grads, 2.0 * chunk_values);
        // The norm's chunks (a 64th of the shard) that straddle the parts landing, copied together
        // until their last part lands: two at a time as backward goes down the model. And a window
        // after the first reads its part back beside the bucket, one at a time.
        grads_in_backward = std::min(grads, 2.0 * sizeof(float) *
                                                std::ceil(grads / sizeof(float) / kernels::kSquareChunks));
        if (microbatches > 1) {
          grads_in_backward += sizeof(float) * std::ceil(plan::engine_largest_bucket_elements(m, l) / l.dp);
        }
        tags.grads = std::max(grads_in_optimizer, grads_in_backward);
      }
      if (l.dp > 1) {
        // The largest unit: a block, or the embedding table (a tied head reads it again).
        const double C = m.n_embd, F = m.ffn();
        const double largest = std::max(12.0 * C * C + 2.0 * C * F, double(m.vocab_size) * C + double(T) * C);
        params_in_units = std::min(shard, 2.0 * sizeof(float) * std::ceil(largest / l.dp));
      }
      tags.params = std::max(params_in_optimizer, params_in_units);
    } else {
      out.nvme_parameter_reads.push_back(0);
    }
    out.nvme_gradient_traffic.push_back(gradient_traffic);
    // A data-parallel compressor's state, and with a loss scale its copy from the step's start,
    // which a skipped step puts back (parallel/training_engine.h).
    if (l.dp > 1) {
      const double domain = plan::stage_params(m, l, rank).total();
      const double state = plan::compressor_state_bytes(m, l, rank, domain, c.compression_options().warmup_steps);
      tags.optimizer += (c.precision_options().loss_scaling.enabled ? 2.0 : 1.0) * state;
    }
    // A delayed update's shadow values and gradients (parallel/delayed_update.h), all step long, and
    // with extrapolation the values its update started from.
    if (c.optim.delayed_update_after > 0) {
      const double copies = c.optim.delayed_update_extrapolate ? 3.0 : 2.0;
      tags.optimizer += copies * sizeof(float) * plan::engine_optimizer_elements(m, l, rank);
    }
    const bool receives_gradients = rank < l.pp - 1 || l.virtual_stages > 1;
    std::vector<exec::UnitWorkspace> workspace(unit_bytes.size());
    for (size_t u = 0; u < unit_bytes.size(); ++u) {
      const bool lowest_of_a_chunk = std::any_of(split.stages.begin(), split.stages.end(), [&](const exec::StagePlan::Stage& s) {
        return s.first == static_cast<int>(u) && u > 0;
      });
      const int64_t posted = receives_gradients ? boundary : 0;
      const int64_t drains = lowest_of_a_chunk ? posted : 0;
      workspace[u] = {unit_bytes[u].forward + posted, unit_bytes[u].backward + drains,
                      unit_bytes[u].backward_beside_activations + drains};
    }
    // Zero bubble: the output gradients kept for the weight halves to come sit in workspace beside
    // what each action holds there.
    for (size_t i = 0; i < program.actions.size(); ++i) {
      const exec::Action& a = program.actions[i];
      const int64_t kept = activations.weight_half_gradients[i];
      if (kept == 0 || a.kind != exec::Action::Kind::Unit) continue;
      const exec::UnitWorkspace& w = workspace[static_cast<size_t>(a.unit)];
      tags.workspace = std::max(tags.workspace,
                                static_cast<double>(kept + (exec::is_forward(a.phase) ? w.forward : w.backward)));
    }
    // Communication buffers are walked with the program: a pipeline's sent tensors, and ZeRO-2/3's
    // buckets and gathered units by the planner's walk of the same unit actions (a pipeline stage's
    // own units; ZeRO-3 keeps them all gathered there).
    std::vector<int64_t> zero_comm;
    if (l.zero_stage >= 2) {
      std::map<std::tuple<int, int, bool>, int64_t> by_action;
      for (const plan::ZeroCommAction& a : plan::engine_zero_comm_walk(m, l, rank)) {
        by_action[{a.unit, a.microbatch, a.backward}] = static_cast<int64_t>(a.bytes);
      }
      for (const exec::Action& a : program.actions) {
        // A recomputation runs inside the backward, among its buffers.
        const bool backward = a.kind == exec::Action::Kind::Unit &&
                              (a.phase != exec::Phase::Forward && a.phase != exec::Phase::Eval);
        const auto it = by_action.find({a.unit, a.microbatch, backward});
        zero_comm.push_back(a.kind == exec::Action::Kind::Unit && it != by_action.end() ? it->second : 0);
      }
    }
    const double transient = static_cast<double>(
        exec::predict_transient_peak(program, activations, workspace, l.pp > 1 ? boundary : 0, zero_comm));
    const double states = (params_offloaded ? 0.0 : tags.params) + (l.gradients_to_nvme ? 0.0 : tags.grads) +
                          tags.weight_stash + tags.working_copies;
    out.tags.push_back(tags);
    // The optimizer's state is in compute memory all step long: in memory, or, offloaded, the three
    // chunks a step streams (between steps: the last one's write-back and the next step's first two,
    // read ahead), and a delayed update's shadow copies. Offloaded parameters' values come in with
    // the state's chunks in the optimizer step, and their units' parts beside the step's transients.
    out.peak.push_back(states + tags.optimizer +
                       (params_offloaded ? std::max(transient + params_in_units + grads_in_backward,
                                                    params_in_optimizer + grads_in_optimizer)
                                         : transient));
    if (out.peak.back() > out.peak[static_cast<size_t>(out.worst)]) out.worst = rank;
  }
  return out;
}

}  // namespace tessera::train
