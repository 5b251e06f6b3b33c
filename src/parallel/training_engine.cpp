#include "parallel/training_engine.h"

#include <cmath>
#include <cstring>

#include "config/compatibility.h"
#include "exec/program_memory.h"
#include "optim/make_optimizer.h"

#include "schedule/generators.h"
#include "schedule/validator.h"
#include "parallel/pipeline_timeline.h"
#include "parallel/expert_parallel.h"
#include "parallel/rank_sum.h"

namespace tessera::parallel {

namespace {

std::array<dist::Communicator*, config::kMeshDims.size()> groups_of(dist::Communicator* dp, dist::Communicator* pp,
                                                                   dist::Communicator* tp,
                                                                   dist::Communicator* ep = nullptr,
                                                                   dist::Communicator* edp = nullptr) {
  std::array<dist::Communicator*, config::kMeshDims.size()> groups{};
  groups[static_cast<size_t>(config::MeshDim::DP)] = dp;
  groups[static_cast<size_t>(config::MeshDim::PP)] = pp;
  groups[static_cast<size_t>(config::MeshDim::TP)] = tp;
  groups[static_cast<size_t>(config::MeshDim::EP)] = ep;
  groups[static_cast<size_t>(config::MeshDim::EDP)] = edp;
  return groups;
}

// The settings the compatibility table reads, as this engine is given them.
config::FeatureSettings feature_settings(const EngineOptions& o, const config::ModelConfig& model) {
  config::FeatureSettings s;
  s.tp = o.layout.tp;
  s.sp = o.layout.sp;
  s.ep = o.layout.ep;
  s.pp = o.layout.pp;
  s.zero_stage = o.layout.zero_stage;
  s.schedule = o.layout.schedule;
  s.compression = o.compression.method;
  s.grad_dtype = config::precision_name(o.precision.grad_dtype);
  s.compute = config::precision_name(o.precision.compute);
  s.recompute = o.recompute.policy;
  s.optimizer = o.optimizer.kind;
  s.moe_experts = model.moe_experts;
  s.offload_optimizer = o.offload_optimizer_chunk_bytes > 0 ? "nvme" : "none";
  s.offload_params = o.offload_params ? "nvme" : "none";
  return s;
}

// The parameters of `domain` (empty: the whole store) parted into the dense ones and the expert
// ones, each as flat ranges in flat order. A range never spans two pieces of the domain: ZeRO cuts
// each piece into shards on its own, and a pipeline stage's pieces (a tied embedding's among them)
// must be cut the same way on every stage that holds them.
std::pair<std::vector<nn::ParamRange>, std::vector<nn::ParamRange>> split_experts(
    const nn::ParameterStore& params, const std::vector<nn::ParamRange>& domain) {
  const std::vector<nn::ParamRange> pieces =
      domain.empty() ? std::vector<nn::ParamRange>{{0, params.numel()}} : domain;
  std::vector<nn::ParamRange> dense, experts;
  for (const nn::ParamRange& piece : pieces) {
    bool fresh_dense = true, fresh_experts = true;  // the first range of each kind in this piece starts anew
    for (const nn::Parameter& p : params.all()) {
      const nn::ParamRange range{static_cast<int64_t>(p.offset), static_cast<int64_t>(p.offset) + p.numel()};
      if (range.size() == 0 || range.begin < piece.begin || range.end > piece.end) continue;
      const bool expert = p.part == nn::ParameterPart::Expert;
      std::vector<nn::ParamRange>& to = expert ? experts : dense;
      bool& fresh = expert ? fresh_experts : fresh_dense;
      if (!fresh && to.back().end == range.begin) {
        to.back().end = range.end;
      } else {
        to.push_back(range);
      }
      fresh = false;
    }
  }
  return {dense, experts};
}

int size_of(dist::Communicator* group) { return group == nullptr ? 1 : group->size(); }

dist::Communicator* unless_alone(dist::Communicator* group) {
  return group != nullptr && group->size() > 1 ? group : nullptr;
}

// This rank's group of `dim` in `mesh` (null: one process). Expert parallelism's groups only where
// the layout has ep > 1: at ep 1 the experts are dense parameters, reduced over dp.
dist::Communicator* mesh_group(const dist::Mesh* mesh, config::MeshDim dim) {
  if (mesh == nullptr) return nullptr;
  const bool expert = dim == config::MeshDim::EP || dim == config::MeshDim::EDP;
  if (expert && mesh->layout().ep <= 1) return nullptr;
  return &mesh->group(dim);
}

// Every rank must run the same program (ZeRO's collectives follow it), so measured times are
// rank 0's everywhere.
exec::UnitTimes agreed(dist::Communicator* group, exec::UnitTimes times) {
  if (group == nullptr || group->size() == 1) return times;
  for (std::vector<double>* v : {&times.forward, &times.backward, &times.rebuild}) {
    if (group->rank() != 0) std::fill(v->begin(), v->end(), 0.0);
    *v = sum_over_ranks(group, *v);
  }
  return times;
}

}  // namespace

TrainingEngine::TrainingEngine(nn::GPT& model, MemoryAccountant& memory, const dist::Mesh* mesh,
                               const EngineOptions& options)
    : model_(model),
      memory_(memory),
      options_(options),
      ownership_(model.parameters()),
      dp_(unless_alone(mesh_group(mesh, config::MeshDim::DP))),
      pp_(unless_alone(mesh_group(mesh, config::MeshDim::PP))),
      tp_(unless_alone(mesh_group(mesh, config::MeshDim::TP))),
      ep_(unless_alone(mesh_group(mesh, config::MeshDim::EP))),
      edp_(unless_alone(mesh_group(mesh, config::MeshDim::EDP))),
      loss_scaler_(options.precision.loss_scaling),
      // Only ZeRO splits elements over the data-parallel group (and, for experts, over edp);
      // without it no square is summed there. Experts are split over ep.
      norms_(groups_of(options.layout.zero_stage >= 1 ? mesh_group(mesh, config::MeshDim::DP) : nullptr, pp_, tp_,
                       ep_, options.layout.zero_stage >= 1 ? edp_ : nullptr)),
      interpreter_(model, ownership_, transforms_, memory, pp_, options.precision.compute) {
  const config::ParallelLayout& layout = options.layout;
  // The data-parallel group as the mesh has it, a group of one at dp 1: the data-parallel
  // transform reduces over it and counts what it sends (metrics.jsonl's dp_bytes_sent).
  dist::Communicator* const dp = mesh_group(mesh, config::MeshDim::DP);
  layout.validate();
  // The pairs of settings that do not run together: the run config refuses them when it is read,
  // and the engine, built from code as well, with the same words (config/compatibility.h).
  if (const auto refusal = config::compatibility_refusal(feature_settings(options, model.config()))) {
    TS_FAIL("{}", *refusal);
  }
  TS_CHECK(layout.ep == size_of(ep_), "the layout has ep {} but the expert-parallel group {} ranks", layout.ep,
           size_of(ep_));
  if (ep_ != nullptr) {
    TS_CHECK(size_of(edp_) == layout.dp / layout.ep, "expert parallelism over {} of {} data-parallel ranks needs an "
             "expert-data-parallel group of {}, not {}", layout.ep, layout.dp, layout.dp / layout.ep, size_of(edp_));
    bool split = false;
    for (const nn::Parameter& p : model.parameters().all()) split = split || !p.spec.replicated_over(config::MeshDim::EP);
    TS_CHECK(split, "expert parallelism over {} ranks with a model none of whose parameters is split: build the model "
             "with this rank's ExpertParallelPlan", ep_->size());
    expert_parallel_ = std::make_unique<ExpertParallel>(*ep_);
    transforms_.add(exec::TransformSlot::ExpertParallel, *expert_parallel_);
  }
  TS_CHECK(layout.tp == size_of(tp_), "the layout has tp {} but the tensor-parallel group {} ranks", layout.tp,
           size_of(tp_));
  TS_CHECK(!layout.sp || options.seq_len % layout.tp == 0, "sequence parallelism over tp {} needs a sequence length "
           "that tp divides, not {}", layout.tp, options.seq_len);
  if (tp_ != nullptr) {
    bool split = false;
    for (const nn::Parameter& p : model.parameters().all()) split = split || !p.spec.replicated_over(config::MeshDim::TP);
    TS_CHECK(split, "tensor parallelism over {} ranks with a model none of whose parameters is split: build the model "
             "with this rank's TensorParallelPlan", tp_->size());
    tensor_parallel_ = std::make_unique<TensorParallel>(*tp_, layout.sp, ownership_);
    transforms_.add(exec::TransformSlot::TensorParallel, *tensor_parallel_);
  }
  TS_CHECK(layout.dp == size_of(dp), "the layout has dp {} but the data-parallel group {} ranks", layout.dp,
           size_of(dp));
  TS_CHECK(layout.pp == size_of(pp_), "the layout has pp {} but the pipeline group {} ranks", layout.pp, size_of(pp_));
  schedule_ = pipeline::make_schedule(layout, {.two_bw_versions = options.two_bw_versions});
  stages_ = split_stages();
  const bool offloads_activations = options.recompute.offload != exec::ActivationOffloadMode::None;
  if (offloads_activations || options.offload_optimizer_chunk_bytes > 0 || options.offload_params) {
    TS_CHECK(!options.offload_dir.empty(), "offloading needs the nvme tier's folder (EngineOptions::offload_dir)");
    nvme_ = std::make_unique<memory::NvmeStore>(memory::NvmeStore::Options{.dir = options.offload_dir});
  }
  if (options.offload_params) {
    TS_CHECK(layout.zero_stage == 3, "memory.offload_params moves ZeRO-3's parameter shards; set "
             "parallel.zero_stage = 3 (at dp 1 the shard is the whole model), not {}", layout.zero_stage);
    TS_CHECK(options.offload_optimizer_chunk_bytes > 0, "memory.offload_params keeps the master values in the nvme "
             "tier, which the offloaded optimizer streams through memory with its state; set "
             "memory.offload_optimizer = \"nvme\" too");
    TS_CHECK(options.delayed_update_after == 0, "memory.offload_params with optim.delayed_update_after: the delayed "
             "update copies the master values, which are in the nvme tier");
  }
  DataParallelOptions dp_options;
  dp_options.zero_stage = layout.zero_stage;
  dp_options.offload_params = options.offload_params ? nvme_.get() : nullptr;
  // The gradients sequence parallelism leaves partial are summed over tp: in memory by the
  // tensor-parallel transform when the program finishes, in the nvme tier as their parts land.
  if (layout.sp) dp_options.sequence_parallel = tp_;
  dp_options.bucket_bytes = options.bucket_bytes;
  dp_options.compression = options.compression;
  dp_options.message_dtype = options.precision.grad_dtype;
  if (pp_ != nullptr) {
    // 2BW's steps fall inside its programs, among transfers whose tags the tied-gradient exchange
    // could match: that exchange gets a communicator of its own.
    dist::Communicator* shared = pp_;
    if (!schedule_.flush) {
      shared_params_comm_ = pp_->split(0, pp_->rank(), "pp-shared");
      shared = shared_params_comm_.get();
    }
    // Claims the master copies of the other stages' parameters, and says which are this rank's:
    // the data-parallel group of this stage reduces and shards only those.
    stage_params_ = std::make_unique<PipelineStageParameters>(model, stages_, *shared, ownership_);
    transforms_.add(exec::TransformSlot::SharedParameters, *stage_params_);
    dp_options.domain = stage_params_->domain();
    // ZeRO-3 keeps each unit of this rank's stages gathered across the step's microbatches.
    if (layout.zero_stage == 3) dp_options.kept_units = units_of_rank();
  }
  if (ep_ != nullptr) {
    TS_CHECK(!options.offload_params, "memory.offload_params with parallel.ep > 1: the nvme tier holds a ZeRO-3 shard "
             "of one contiguous range, and expert parallelism parts it into the dense and the expert parameters");
    auto [dense, experts] = split_experts(model.parameters(), dp_options.domain);
    TS_CHECK(!dense.empty(), "expert parallelism: every parameter of this rank's stages is an expert");
    DataParallelOptions expert_options = dp_options;
    dp_options.domain = std::move(dense);
    if (!experts.empty()) {
      expert_options.domain = std::move(experts);
      expert_options.group = config::MeshDim::EDP;
      // The experts' gradients are compressed over their own group, where it has more than one rank
      // (ep = dp leaves each expert on one rank: nothing to reduce). QSGD keys its rounding by
      // (seed, step, rank, bucket): another seed keeps the experts' buckets from drawing the same
      // numbers as the dense ones of the same index.
      if (edp_ == nullptr) expert_options.compression.method = CompressionMethod::None;
      expert_options.compression.seed = options.compression.seed ^ 0x9e3779b97f4a7c15ULL;
      expert_data_parallel_ = std::make_unique<DataParallel>(model.parameters(), model.units(), edp_, memory, expert_options,
                                                  ownership_, transforms_);
      // ZeRO-3: the experts' shards are gathered over edp, the dense ones over dp (docs/moe.md).
      if (layout.zero_stage == 3) dp_options.working_answered_elsewhere = expert_data_parallel_->domain_ids();
    }
  }
  data_parallel_ = std::make_unique<DataParallel>(model.parameters(), model.units(), dp, memory, dp_options,
                                                  ownership_, transforms_);
  // A step the loss scale skips must leave a compressor's error feedback (and PowerSGD's warm start)
  // as it found them: the step's overflow would otherwise stay in them for every later step. A copy
  // of that state, taken as each step begins.
  if (data_parallel_->compressor() != nullptr && expert_data_parallel_ &&
      expert_data_parallel_->compressor() != nullptr) {
    joint_compressor_state_ =
        std::make_unique<JointRankState>(*data_parallel_->compressor(), *expert_data_parallel_->compressor());
  }
  if (loss_scaler_.enabled()) {
    loss_scaling_ = std::make_unique<LossScaling>(loss_scaler_);
    transforms_.add(exec::TransformSlot::LossScaling, *loss_scaling_);
  }
  if (loss_scaler_.enabled() && compressor_state() != nullptr) {
    for (auto& [name, tensor] : compressor_state()->rank_state_tensors()) {
      compressor_state_at_step_start_.push_back(
          Tensor::empty(tensor.shape(), tensor.dtype(), MemoryTag::Optimizer, memory));
    }
  }
  if (offloads_activations) {
    activation_offload_ = std::make_unique<exec::ActivationOffload>(*nvme_);
    transforms_.add(exec::TransformSlot::ActivationPlacement, *activation_offload_);
  }
  if (options.activation_encoding != exec::ActivationEncoding::None) {
    activation_encoder_ = std::make_unique<exec::ActivationEncoder>(options.activation_encoding, memory);
    transforms_.add(exec::TransformSlot::ActivationEncoding, *activation_encoder_);
  }

  const int B = layout.micro_batch, T = options.seq_len;
  times_ = exec::nominal_unit_times(model.config(), B, T);
  // Measuring runs each unit alone on this rank, which an MoE layer split over ep cannot.
  // The budgeted policies weigh recomputation by the units' times (optimal's DP, DTR's c / (m s)).
  const bool weighs_times = options.recompute.policy == config::RecomputePolicy::Optimal ||
                            options.recompute.policy == config::RecomputePolicy::Dtr;
  if (weighs_times && options.measure_unit_times && ep_ == nullptr) {
    DataParallel::FullParameters full = full_parameters();
    times_ = agreed(dp, exec::measure_unit_times(model, full, memory, B, T));
  }
  plan(times_);
  if (!schedule_.flush) {
    weight_versions_ = std::make_unique<WeightVersions>(
        model.parameters(), parameters_of_units(model.parameters(), model.units(), units_of_rank()), memory,
        ownership_);
  }
  if (options.precision.mixed()) {
    working_copies_ = std::make_unique<WorkingCopies>(model.parameters(), options.precision.compute, memory,
                                                      ownership_);
    transforms_.add(exec::TransformSlot::Precision, *working_copies_);
  }
  if (layout.zero_stage >= 1 || tp_ != nullptr || ep_ != nullptr) {
    // ZeRO splits tensors over the data-parallel group (experts over edp), tensor parallelism over
    // its group, expert parallelism the expert stacks over ep: per-tensor statistics are summed
    // over them.
    shard_reduction_ = std::make_unique<GroupShardReduction>(groups_of(layout.zero_stage >= 1 ? dp : nullptr, nullptr,
                                                                       tp_, ep_,
                                                                       layout.zero_stage >= 1 ? edp_ : nullptr));
  }
  if (options.optimizer.kind == optim::OptimizerKind::OneBitAdam) {
    // The experts' momentum is averaged over the ranks that hold each expert (edp), the rest over dp.
    const std::vector<optim::Segment> segments = ownership_.master_segments();
    optim::ExchangeGroups exchange{{dp_}, {}};
    if (ep_ != nullptr) exchange.groups.push_back(edp_);
    for (const optim::Segment& s : segments) {
      exchange.group_of.push_back(ep_ != nullptr && s.param->part == nn::ParameterPart::Expert ? 1 : 0);
    }
    optimizer_ = optim::make_optimizer(memory, options.optimizer, model.parameters(), segments, shard_reduction_.get(),
                                       &exchange);
    one_bit_adam_ = dynamic_cast<optim::OneBitAdam*>(optimizer_.get());
    std::vector<DataParallel*> domains{data_parallel_.get()};
    if (expert_data_parallel_) domains.push_back(expert_data_parallel_.get());
    one_bit_exchange_ = std::make_unique<OneBitExchange>(*one_bit_adam_, std::move(domains));
    transforms_.add(exec::TransformSlot::GradientExchange, *one_bit_exchange_);
  } else if (options.offload_optimizer_chunk_bytes > 0) {
    const auto make = [&](std::span<const optim::Segment> chunk) {
      return optim::make_optimizer(memory, options.optimizer, model.parameters(), chunk, shard_reduction_.get());
    };
    const auto bytes = [&](std::span<const optim::Segment> chunk) { return optim::state_bytes(options.optimizer, chunk); };
    auto offloaded = std::make_unique<optim::OffloadedOptimizer>(ownership_.master_segments(), make, bytes, *nvme_,
                                                                 options.offload_optimizer_chunk_bytes, memory,
                                                                 data_parallel_->offloaded_values(),
                                                                 data_parallel_->offloaded_gradients());
    offloaded_optimizer_ = offloaded.get();
    optimizer_ = std::move(offloaded);
  } else {
    optimizer_ = optim::make_optimizer(memory, options.optimizer, model.parameters(), ownership_.master_segments(),
                                       shard_reduction_.get());
  }
  if (options.delayed_update_after > 0) {
    TS_CHECK(one_bit_adam_ == nullptr && weight_versions_ == nullptr,
             "the delayed parameter update runs with a flushing schedule and an optimizer that does not communicate "
             "(not 1-bit Adam, not 2BW)");
    TS_CHECK(shard_reduction_ == nullptr || optim::updates_elementwise(options.optimizer.kind),
             "optim.delayed_update_after with optim.name = \"{}\" under ZeRO, tensor or expert parallelism: its "
             "step sums per-tensor statistics over ranks, which an update on its own thread cannot do beside the next "
             "step's collectives; delay adamw or sgd there",
             optim::optimizer_name(options.optimizer.kind));
    delayed_update_ = std::make_unique<DelayedUpdate>(optim::total_elements(ownership_.master_segments()),
                                                      options.delayed_update_extrapolate, memory);
  }
  evaluation_ = exec::lower_evaluation(stages_, pp_ ? pp_->rank() : 0, size_of(pp_));
}

std::vector<int> TrainingEngine::units_of_rank() const {
  std::vector<int> units;
  const int rank = pp_ ? pp_->rank() : 0, ranks = size_of(pp_);
  for (size_t s = 0; s < stages_.stages.size(); ++s) {
    if (static_cast<int>(s) % ranks != rank) continue;
    for (int u = stages_.stages[s].first; u < stages_.stages[s].last; ++u) units.push_back(u);
  }
  return units;
}

exec::StagePlan TrainingEngine::split_stages() const {
  if (options_.stage_layers.empty()) {
    // From FLOPs, not from measured times: every rank must cut the model at the same places.
    const exec::UnitTimes nominal = exec::nominal_unit_times(model_.config(), options_.layout.micro_batch,
                                                             options_.seq_len);
    std::vector<double> costs(nominal.forward.size());
    for (size_t u = 0; u < costs.size(); ++u) costs[u] = nominal.forward[u] + nominal.backward[u];
    return exec::balanced_stages(costs, schedule_.stages());
  }
  TS_CHECK(static_cast<int>(options_.stage_layers.size()) == schedule_.stages(),
           "{} stage sizes given for {} pipeline stages", options_.stage_layers.size(), schedule_.stages());
  return exec::stages_of_blocks(model_.num_units(), options_.stage_layers);
}

void TrainingEngine::plan(const exec::UnitTimes& times) {
  // The split does not change with the number of microbatches: the stages keep their parameters.
  schedule_ = pipeline::make_schedule(options_.layout, {.two_bw_versions = options_.two_bw_versions});
  pipeline::check_valid(schedule_);
  exec::plan_recompute(stages_, model_.config(), options_.layout.micro_batch, options_.seq_len, options_.recompute,
                       times, options_.layout.tp, options_.layout.sp, options_.precision.compute);
  program_ = exec::lower_training(schedule_, pp_ ? pp_->rank() : 0, stages_);
}

void TrainingEngine::plan_program(int first_step, int batches) {
  if (schedule_.first_step == first_step && schedule_.steps == batches) return;
  schedule_ = pipeline::make_schedule(options_.layout, {.steps = batches, .first_step = first_step, .two_bw_versions = options_.two_bw_versions});
  pipeline::check_valid(schedule_);
  program_ = exec::lower_training(schedule_, pp_ ? pp_->rank() : 0, stages_);
}

void TrainingEngine::set_microbatches(int microbatches) {
  options_.layout.global_batch = int64_t{microbatches} * options_.layout.dp * options_.layout.micro_batch;
  plan(times_);
}

TrainingEngine::~TrainingEngine() {
  if (activation_offload_) transforms_.remove(exec::TransformSlot::ActivationPlacement);
}

TrainingEngine::StepResult TrainingEngine::train_step(std::span<const exec::MicrobatchInput> microbatches,
                                                      const exec::StepOptions& options, float lr,
                                                      std::optional<double> max_grad_norm) {
  if (weight_versions_) return train_batches(microbatches, options, std::span(&lr, 1), max_grad_norm).front();
  plan_program(0, 1);
  running_step_ = options.step;
  StepResult result;
  zero_grads();
  copy_compressor_state(CompressorStateCopy::Keep);
  const exec::ProgramResult run = interpreter_.run(program_, microbatches, options,
                                                   [&](int) { optimizer_step(result, lr, max_grad_norm); });
  const exec::ProgramResult total = over_pipeline(run);
  result.loss_sum = total.loss_sum;
  result.counted = total.counted;
  result.moe = moe_over_ranks(run.moe);
  result.recompute_seconds = run.recompute_seconds;
  return result;
}

void TrainingEngine::copy_compressor_state(CompressorStateCopy direction) {
  if (compressor_state_at_step_start_.empty()) return;
  std::vector<std::pair<std::string, Tensor>> state = compressor_state()->rank_state_tensors();
  for (size_t i = 0; i < state.size(); ++i) {
    Tensor& kept = compressor_state_at_step_start_[i];
    Tensor& live = state[i].second;
    if (direction == CompressorStateCopy::Keep) {
      std::memcpy(kept.raw(), live.raw(), live.nbytes());
    } else {
      std::memcpy(live.raw(), kept.raw(), live.nbytes());
    }
  }
}

void TrainingEngine::zero_grads() {
  data_parallel_->zero_grads();
  if (expert_data_parallel_) expert_data_parallel_->zero_grads();
}

void TrainingEngine::after_optimizer_step() {
  data_parallel_->after_optimizer_step();
  if (expert_data_parallel_) expert_data_parallel_->after_optimizer_step();
}

nn::MoeStatistics TrainingEngine::moe_over_ranks(const nn::MoeStatistics& mine) const {
  const int E = model_.config().moe_experts;
  if (E == 0) return mine;
  std::vector<double> packed{static_cast<double>(mine.assignments), static_cast<double>(mine.dropped),
                             mine.aux_loss_sum, mine.z_loss_sum, static_cast<double>(mine.routings),
                             static_cast<double>(mine.remote_rows)};
  for (int e = 0; e < E; ++e) {
    packed.push_back(static_cast<size_t>(e) < mine.load.size() ? static_cast<double>(mine.load[static_cast<size_t>(e)]) : 0.0);
  }
  // Tensor-parallel ranks route the same tokens: they are counted once.
  if (data_parallel_->comm() != nullptr && data_parallel_->comm()->size() > 1) packed = sum_over_ranks(data_parallel_->comm(), packed);
  if (pp_ != nullptr) packed = sum_over_ranks(pp_, packed);
  nn::MoeStatistics total;
  total.assignments = static_cast<int64_t>(packed[0]);
  total.dropped = static_cast<int64_t>(packed[1]);
  total.aux_loss_sum = packed[2];
  total.z_loss_sum = packed[3];
  total.routings = static_cast<int64_t>(packed[4]);
  total.remote_rows = static_cast<int64_t>(packed[5]);
  for (int e = 0; e < E; ++e) total.load.push_back(static_cast<int64_t>(packed[6 + static_cast<size_t>(e)]));
  return total;
}

std::vector<TrainingEngine::StepResult> TrainingEngine::train_batches(
    std::span<const exec::MicrobatchInput> microbatches, const exec::StepOptions& options, std::span<const float> lrs,
    std::optional<double> max_grad_norm) {
  const int batches = static_cast<int>(lrs.size());
  const int m = schedule_.microbatches;
  TS_CHECK(batches >= 1, "train_batches needs at least one batch (one learning rate per batch)");
  TS_CHECK(static_cast<int64_t>(microbatches.size()) == int64_t{batches} * m,
           "{} batches of {} microbatches need {} microbatches, {} were given", batches, m, int64_t{batches} * m,
           microbatches.size());
  std::vector<StepResult> results(static_cast<size_t>(batches));
  if (!weight_versions_) {
    for (int b = 0; b < batches; ++b) {
      exec::StepOptions one = options;
      one.step = options.step + static_cast<uint64_t>(b);
      if (b + 1 < batches) one.timeline = nullptr;
      results[static_cast<size_t>(b)] =
          train_step(microbatches.subspan(static_cast<size_t>(b) * m, static_cast<size_t>(m)), one,
                     lrs[static_cast<size_t>(b)], max_grad_norm);
    }
    return results;
  }
  TS_CHECK(static_cast<int64_t>(options.step) == weight_versions_->newest(),
           "PipeDream-2BW: batch {} follows {} optimizer steps, but the parameters are weight version {}; a resumed "
           "run must restore its weight versions from the checkpoint (restore_weight_versions)",
           options.step, options.step, weight_versions_->newest());
  plan_program(static_cast<int>(options.step), batches);
  zero_grads();
  // Each rank reaches batch b's step at its own point of its list, so the step's collectives over
  // the pipeline group (the tied-gradient exchange, the norm) and the data-parallel group (the
  // gradient buckets, the norm) must not wait on anything a peer does only after its own step b.
  // They do not: a rank's actions before its step b need activations and gradients its neighbours
  // produce before their step b (the first stage runs the most forwards ahead, the last stage's
  // backwards come first), sends never wait, and the interpreter waits for this rank's sends only
  // at the program's last step. Every rank calls the collectives of steps 0, 1, ... in that order.
  const exec::ProgramResult run = interpreter_.run(program_, microbatches, options, [&](int batch) {
    weight_versions_->before_step();  // batch + 1 still reads the weights this step replaces
    optimizer_step(results[static_cast<size_t>(batch)], lrs[static_cast<size_t>(batch)], max_grad_norm);
    // The gradient buffers start over for the next batch: all of this batch's backwards on this
    // rank came before its step, and none of the next batch's.
    zero_grads();
  });
  std::vector<double> sums;
  for (int b = 0; b < batches; ++b) {
    sums.push_back(run.batch_loss_sums[static_cast<size_t>(b)]);
    sums.push_back(static_cast<double>(run.batch_counted[static_cast<size_t>(b)]));
  }
  // Only the last stage computes the loss; every pipeline rank reports it.
  if (pp_ != nullptr) sums = sum_over_ranks(pp_, sums);
  for (int b = 0; b < batches; ++b) {
    results[static_cast<size_t>(b)].loss_sum = sums[2 * static_cast<size_t>(b)];
    results[static_cast<size_t>(b)].counted = static_cast<int64_t>(sums[2 * static_cast<size_t>(b) + 1]);
  }
  results.back().moe = moe_over_ranks(run.moe);
  results.back().recompute_seconds = run.recompute_seconds;
  return results;
}

void TrainingEngine::optimizer_step(StepResult& result, float lr, std::optional<double> max_grad_norm) {
  const std::vector<optim::Segment> segments = ownership_.master_segments();
  // The previous step's delayed update is done with by now (this step's backward read the weights
  // before it); its values go in before this step's update starts from them, extrapolated where
  // the next step computes on a guess of the weights after its own update.
  if (delayed_update_ && delayed_update_->apply(segments, options_.delayed_update_extrapolate
                                                              ? DelayedUpdate::Weights::Extrapolated
                                                              : DelayedUpdate::Weights::Updated)) {
    after_update_applied();
  }
  // The gradients are complete here: the chain's finish reduced them over the data-parallel groups
  // and summed them over tp (sequence parallelism) and between the stages holding the tied
  // embedding.
  result.loss_scale = loss_scaling_ ? loss_scaling_->program_scale() : 1.0;
  if (one_bit_exchange_ && !one_bit_exchange_->reduced()) {
    local_gradient_step(result, lr, max_grad_norm, segments);
    return;
  }
  // With a loss scale the norm is measured even without clipping: it is how every rank learns, with
  // no message of its own, whether any rank's gradient overflowed.
  if (max_grad_norm || loss_scaling_) {
    const bool compressed_non_finite =
        data_parallel_->compressed_non_finite() || (expert_data_parallel_ && expert_data_parallel_->compressed_non_finite());
    OffloadedGradients* const elsewhere = data_parallel_->offloaded_gradients();
    result.grad_norm = norms_.compute(stage_params_ ? stage_params_->norm_segments(segments) : segments,
                                      compressed_non_finite, elsewhere);
    if (result.grad_norm.non_finite) {
      result.skipped = true;  // every rank sees the same norm, so every rank skips
      loss_scaler_.update(false);
      copy_compressor_state(CompressorStateCopy::Restore);
      return;
    }
    // Back to the true gradient: the loss-scaling transform's seam in the step.
    if (loss_scaling_) loss_scaling_->unscale(segments, elsewhere, result.grad_norm);
    if (max_grad_norm) {
      const std::optional<float> clipped = GradNormService::clip(segments, result.grad_norm, *max_grad_norm);
      if (clipped && elsewhere != nullptr) elsewhere->scale_when_read(*clipped);
    }
  }
  if (delayed_update_ && running_step_ >= static_cast<uint64_t>(options_.delayed_update_after)) {
    delayed_update_->start(*optimizer_, lr, segments);
    return;
  }
  optimizer_->step(lr, segments);
  after_update_applied();
}

void TrainingEngine::after_update_applied() {
  after_optimizer_step();
  if (working_copies_) working_copies_->invalidate();
}

void TrainingEngine::apply_delayed_update() {
  if (!delayed_update_) return;
  if (delayed_update_->apply(ownership_.master_segments())) after_update_applied();
  // What comes next (a load) may write the master values: they are copied again at the next start.
  delayed_update_->forget_values();
}

void TrainingEngine::local_gradient_step(StepResult& result, float lr, std::optional<double> max_grad_norm,
                                         std::span<const optim::Segment> segments) {
  if (max_grad_norm || loss_scaling_) {
    // Each rank's gradient is its part of the global batch's mean: R times it is its local batch's
    // mean gradient, whose norm each rank clips by on its own (no reduced gradient exists to
    // measure). Whether any is not finite is agreed before 1-bit Adam's exchange, so every rank
    // skips together, with its momentum and error feedback as the step found them; under a loss
    // scale this is the overflow check, measured with or without clipping.
    result.grad_norm = norms_.compute(stage_params_ ? stage_params_->norm_segments(segments) : segments);
    result.grad_norm.norm *= static_cast<double>(size_of(dp_));
    const double non_finite = result.grad_norm.non_finite || !std::isfinite(result.grad_norm.norm) ? 1.0 : 0.0;
    if (sum_over_ranks(dp_, std::vector<double>{non_finite}).front() > 0) {
      result.grad_norm.non_finite = true;
      result.skipped = true;
      loss_scaler_.update(false);
      return;
    }
    // Back to the true local gradient, exactly (LossScaling::unscale says why).
    if (loss_scaling_) loss_scaling_->unscale(segments, nullptr, result.grad_norm);
    if (max_grad_norm) GradNormService::clip(segments, result.grad_norm, *max_grad_norm);
  }
  optimizer_->step(lr, segments);
  after_update_applied();
}

RankLocalState* TrainingEngine::rank_local_state() {
  if (one_bit_adam_ != nullptr) return one_bit_adam_;
  return compressor_state();
}

RankLocalState* TrainingEngine::compressor_state() {
  if (joint_compressor_state_) return joint_compressor_state_.get();
  return data_parallel_->compressor();
}

void TrainingEngine::restore_weight_versions(int64_t step) {
  if (weight_versions_) weight_versions_->restore(step);
}

pipeline::MeasuredTimeline TrainingEngine::measured_timeline(const exec::TimelineRecorder& recorder) const {
  return gather_timeline(schedule_, program_, recorder, pp_);
}

exec::ProgramResult TrainingEngine::evaluate(const exec::MicrobatchInput& microbatch) {
  return over_pipeline(interpreter_.run(evaluation_, std::span(&microbatch, 1), {}));
}

exec::ProgramResult TrainingEngine::over_pipeline(const exec::ProgramResult& mine) const {
  if (pp_ == nullptr) return mine;
  // Only the last stage computes the loss; every pipeline rank reports it.
  const std::vector<double> sums = sum_over_ranks(pp_, std::vector<double>{mine.loss_sum, double(mine.counted)});
  exec::ProgramResult total;
  total.loss_sum = sums[0];
  total.counted = static_cast<int64_t>(sums[1]);
  return total;
}

std::vector<const nn::Parameter*> TrainingEngine::optimizer_parameters() {
  std::vector<const nn::Parameter*> out;
  for (const optim::Segment& s : ownership_.master_segments()) {
    TS_CHECK(s.begin == 0 && s.end == s.param->numel(), "'{}': the optimizer holds part of it (ZeRO), not the whole",
             s.param->name);
    out.push_back(s.param);
  }
  return out;
}

bool TrainingEngine::writes_checkpoint_of(const nn::Parameter& p, bool sharded_by_zero) const {
  if (stage_params_ && stage_params_->held_by_lower_rank(p)) return false;
  if (tp_ != nullptr && p.spec.replicated_over(config::MeshDim::TP) && tp_->rank() != 0) return false;
  if (sharded_by_zero) return true;
  const bool expert = ep_ != nullptr && p.part == nn::ParameterPart::Expert;
  return expert ? edp_ == nullptr || edp_->rank() == 0 : data_parallel_->rank() == 0;
}

DataParallel::FullParameters TrainingEngine::full_parameters() {
  // Each stage's values from its data-parallel group (ZeRO-3 gathers them), then every stage's
  // broadcast from the lowest pipeline rank holding it.
  DataParallel::FullParameters full = data_parallel_->full_parameters();
  if (expert_data_parallel_) expert_data_parallel_->gather_into(full);
  if (stage_params_) stage_params_->full_values(full.flat_values());
  return full;
}

DataParallel::ReadOnlyParameters TrainingEngine::read_only_parameters(DataParallel::ReadOrder order) {
  // Under a pipeline or expert parallelism no parameter is in the nvme tier (refused there), so the
  // model is gathered whole: each stage's values over its data-parallel group (the experts' over
  // edp), then over the pipeline.
  if (stage_params_ || expert_data_parallel_) return DataParallel::ReadOnlyParameters(full_parameters());
  return data_parallel_->read_only_parameters(order);
}

DataParallel::WritableParameters TrainingEngine::writable_parameters() {
  if (stage_params_ || expert_data_parallel_) return DataParallel::WritableParameters(full_parameters());
  return data_parallel_->writable_parameters();
}

int64_t TrainingEngine::predicted_activation_peak() const {
  return exec::predict_program_memory(program_, model_.config(), options_.layout.micro_batch, options_.seq_len,
                                      options_.layout.tp, options_.layout.sp, options_.precision.compute,
                                      options_.activation_encoding)
      .peak;
}

}  // namespace tessera::parallel
