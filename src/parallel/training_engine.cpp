#include "parallel/training_engine.h"

#include "parallel/pipeline/generators.h"
#include "parallel/pipeline/validator.h"
#include "parallel/rank_sum.h"

namespace tessera::parallel {

namespace {

std::array<dist::Communicator*, config::kMeshDims.size()> dp_groups(dist::Communicator* dp) {
  std::array<dist::Communicator*, config::kMeshDims.size()> groups{};
  groups[static_cast<size_t>(config::MeshDim::DP)] = dp;
  return groups;
}

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
                               const EngineOptions& options)
    : model_(model),
      memory_(memory),
      options_(options),
      ownership_(model.parameters()),
      norms_(dp_groups(dp)),
      interpreter_(model, ownership_, transforms_, memory) {
  const config::ParallelLayout& layout = options.layout;
  layout.validate();
  TS_CHECK(layout.pp == 1 && layout.tp == 1 && layout.ep == 1,
           "the training engine runs one rank of data parallelism holding the whole model; {} needs the pipeline, "
           "tensor or expert parallel executors", layout.describe());
  TS_CHECK(layout.dp == (dp == nullptr ? 1 : dp->size()), "the layout has dp {} but the data-parallel group {} ranks",
           layout.dp, dp == nullptr ? 1 : dp->size());
  dp_ = std::make_unique<DataParallel>(model.parameters(), model.units(), dp, memory,
                                       DataParallelOptions{layout.zero_stage, options.bucket_bytes}, ownership_,
                                       transforms_);
  optimizer_ = std::make_unique<optim::AdamW>(memory, options.adam, optim::total_elements(ownership_.master_segments()));

  const int B = layout.micro_batch, T = options.seq_len;
  times_ = exec::nominal_unit_times(model.config(), B, T);
  if (options.recompute.policy == memory::RecomputePolicy::Optimal && options.measure_unit_times) {
    DataParallel::FullParameters full = dp_->full_parameters();
    times_ = agreed(dp, exec::measure_unit_times(model, full, memory, B, T));
  }
  plan(times_);
  evaluation_ = exec::lower_evaluation(model.num_units());
}

void TrainingEngine::plan(const exec::UnitTimes& times) {
  schedule_ = pipeline::make_schedule(options_.layout);
  const pipeline::ValidationReport report = pipeline::check_valid(schedule_);
  alive_ = report.peak_alive_per_rank.front();
  stages_ = exec::even_stages(model_.num_units(), schedule_.stages());
  exec::plan_recompute(stages_, model_.config(), options_.layout.micro_batch, options_.seq_len, options_.recompute,
                       times);
  program_ = exec::lower_training(schedule_, 0, stages_);
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
    if (max_grad_norm) {
      result.grad_norm = norms_.compute(segments);
      if (result.grad_norm.non_finite) {
        result.skipped = true;  // every rank sees the same norm, so every rank skips
        return;
      }
      GradNormService::clip(segments, result.grad_norm, *max_grad_norm);
    }
    optimizer_->step(lr, segments);
    dp_->after_optimizer_step();
  });
  result.loss_sum = run.loss_sum;
  result.counted = run.counted;
  return result;
}

exec::ProgramResult TrainingEngine::evaluate(const exec::MicrobatchInput& microbatch) {
  return interpreter_.run(evaluation_, std::span(&microbatch, 1), {});
}

std::optional<exec::ActivationPrediction> TrainingEngine::predicted_activations() const {
  if (stages_.stages.size() != 1 || schedule_.split_backward) return std::nullopt;
  return exec::predict_activations(stages_, model_.config(), options_.layout.micro_batch, options_.seq_len, alive_);
}

}  // namespace tessera::parallel
