#include "parallel/training_engine.h"

#include "exec/program_memory.h"
#include "optim/make_optimizer.h"

#include "parallel/pipeline/generators.h"
#include "parallel/pipeline/validator.h"
#include "parallel/pipeline_timeline.h"
#include "parallel/rank_sum.h"

namespace tessera::parallel {

namespace {

std::array<dist::Communicator*, config::kMeshDims.size()> groups_of(dist::Communicator* dp, dist::Communicator* pp) {
  std::array<dist::Communicator*, config::kMeshDims.size()> groups{};
  groups[static_cast<size_t>(config::MeshDim::DP)] = dp;
  groups[static_cast<size_t>(config::MeshDim::PP)] = pp;
  return groups;
}

int size_of(dist::Communicator* group) { return group == nullptr ? 1 : group->size(); }

// Every rank must run the same program (ZeRO's collectives follow it), so measured times are
// rank 0's everywhere.
exec::UnitTimes agreed(dist::Communicator* group, exec::UnitTimes times) {
  if (group == nullptr || group->size() == 1) return times;
  for (std::vector<double>* v : {&times.forward, &times.backward}) {
    if (group->rank() != 0) std::fill(v->begin(), v->end(), 0.0);
    *v = sum_over_ranks(group, *v);
  }
  return times;
}

}  // namespace

TrainingEngine::TrainingEngine(nn::GPT& model, MemoryAccountant& memory, dist::Communicator* dp,
                               const EngineOptions& options, dist::Communicator* pp)
    : model_(model),
      memory_(memory),
      options_(options),
      ownership_(model.parameters()),
      pp_(pp != nullptr && pp->size() > 1 ? pp : nullptr),
      norms_(groups_of(dp, pp_)),
      interpreter_(model, ownership_, transforms_, memory, pp_) {
  const config::ParallelLayout& layout = options.layout;
  layout.validate();
  TS_CHECK(layout.tp == 1 && layout.ep == 1,
           "the training engine runs data and pipeline parallelism; {} needs the tensor or expert parallel executors",
           layout.describe());
  TS_CHECK(layout.dp == size_of(dp), "the layout has dp {} but the data-parallel group {} ranks", layout.dp,
           size_of(dp));
  TS_CHECK(layout.pp == size_of(pp), "the layout has pp {} but the pipeline group {} ranks", layout.pp, size_of(pp));
  TS_CHECK(layout.pp == 1 || layout.zero_stage <= 2, "{}", zero3_with_pipelining_refusal(layout));
  schedule_ = pipeline::make_schedule(layout);
  stages_ = split_stages();
  DataParallelOptions dp_options{layout.zero_stage, options.bucket_bytes, {}};
  if (pp_ != nullptr) {
    // Claims the master copies of the other stages' parameters, and says which are this rank's:
    // the data-parallel group of this stage reduces and shards only those.
    stage_params_ = std::make_unique<PipelineStageParameters>(model, stages_, *pp_, ownership_);
    dp_options.domain = stage_params_->domain();
  }
  dp_ = std::make_unique<DataParallel>(model.parameters(), model.units(), dp, memory, dp_options, ownership_,
                                       transforms_);

  const int B = layout.micro_batch, T = options.seq_len;
  times_ = exec::nominal_unit_times(model.config(), B, T);
  if (options.recompute.policy == memory::RecomputePolicy::Optimal && options.measure_unit_times) {
    DataParallel::FullParameters full = dp_->full_parameters();
    times_ = agreed(dp, exec::measure_unit_times(model, full, memory, B, T));
  }
  plan(times_);
  if (layout.zero_stage >= 1) {
    // ZeRO splits tensors over the data-parallel group: per-tensor statistics are summed over it.
    shard_reduction_ = std::make_unique<GroupShardReduction>(groups_of(dp, nullptr));
  }
  optimizer_ = optim::make_optimizer(memory, options.optimizer, model.parameters(), ownership_.master_segments(),
                                     shard_reduction_.get());
  evaluation_ = exec::lower_evaluation(stages_, pp_ ? pp_->rank() : 0, size_of(pp_));
}

std::string zero3_with_pipelining_refusal(const config::ParallelLayout& layout) {
  return fmt::format(
      "parallel.zero_stage = 3 with parallel.pp = {}: ZeRO-3 gathers each unit's parameters for every action that "
      "runs it, and a pipeline runs each unit once per microbatch in forward and again in backward, so it would "
      "gather them 2m times a step (torchtitan keeps them gathered across microbatches instead, which gives back "
      "ZeRO-3's saving); use parallel.zero_stage = 1 or 2, which shard each stage's optimizer state (and "
      "gradients) over its data-parallel group",
      layout.pp);
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
  schedule_ = pipeline::make_schedule(options_.layout);
  pipeline::check_valid(schedule_);
  exec::plan_recompute(stages_, model_.config(), options_.layout.micro_batch, options_.seq_len, options_.recompute,
                       times);
  program_ = exec::lower_training(schedule_, pp_ ? pp_->rank() : 0, stages_);
}

void TrainingEngine::set_microbatches(int microbatches) {
  options_.layout.global_batch = int64_t{microbatches} * options_.layout.dp * options_.layout.micro_batch;
  plan(times_);
}

TrainingEngine::~TrainingEngine() = default;

TrainingEngine::StepResult TrainingEngine::train_step(std::span<const exec::MicrobatchInput> microbatches,
                                                      const exec::StepOptions& options, float lr,
                                                      std::optional<double> max_grad_norm) {
  StepResult result;
  dp_->zero_grads();
  const exec::ProgramResult run = interpreter_.run(program_, microbatches, options, [&] {
    const std::vector<optim::Segment> segments = ownership_.master_segments();
    if (stage_params_) stage_params_->sum_shared_gradients(segments);
    if (max_grad_norm) {
      result.grad_norm = norms_.compute(stage_params_ ? stage_params_->norm_segments(segments) : segments);
      if (result.grad_norm.non_finite) {
        result.skipped = true;  // every rank sees the same norm, so every rank skips
        return;
      }
      GradNormService::clip(segments, result.grad_norm, *max_grad_norm);
    }
    optimizer_->step(lr, segments);
    dp_->after_optimizer_step();
  });
  const exec::ProgramResult total = over_pipeline(run);
  result.loss_sum = total.loss_sum;
  result.counted = total.counted;
  return result;
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
  return exec::ProgramResult{sums[0], static_cast<int64_t>(sums[1])};
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

DataParallel::FullParameters TrainingEngine::full_parameters() {
  if (stage_params_) stage_params_->full_values();
  return dp_->full_parameters();
}

int64_t TrainingEngine::predicted_activation_peak() const {
  return exec::predict_program_memory(program_, model_.config(), options_.layout.micro_batch, options_.seq_len).peak;
}

}  // namespace tessera::parallel
