#pragma once
// The phases of Trainer::run (train/trainer.h), in the order it calls them, and what they hand on:
//
//   RunStart      the groups of the layout, the data (checked before any memory goes to the
//                 model), the run folder and its lock, and where the run starts: fresh, or the
//                 checkpoint it resumes (or nothing to do: that checkpoint is at train.steps)
//   TrainingRun   the model and its training engine on this rank, then
//     restore()       the weights of train.init_from, or the resumed checkpoint's whole state
//     announce()      the metrics log reopened, the start lines printed
//     train()         the step loop: batches, the engine's call, the losses agreed on by every
//                     rank, their lines, then evaluation, samples, the timeline and checkpoints
//     finish()        the profile table, the chart and the final sample
//
// Internal to src/train: the trainer is the interface. Both are built in place and hold on to the
// config, the world and the result that Trainer::run owns.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/profiler.h"
#include "core/stop_signals.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "dist/communicator.h"
#include "dist/mesh.h"
#include "exec/timeline_recorder.h"
#include "io/metrics.h"
#include "memory/disk_bandwidth.h"
#include "nn/gpt.h"
#include "optim/lr_schedule.h"
#include "parallel/expert_parallel.h"
#include "parallel/tensor_parallel.h"
#include "parallel/training_engine.h"
#include "train/checkpoint.h"
#include "train/float_gemm_choice.h"
#include "train/memory_check.h"
#include "train/offload_folder.h"
#include "train/peak_flops.h"
#include "train/profile_report.h"
#include "train/progress.h"
#include "train/run_config.h"
#include "train/run_folder.h"
#include "train/run_history.h"
#include "train/trainer.h"

namespace tessera::train {

using Clock = std::chrono::steady_clock;

// Where a run starts. Collective over `world`: every rank learns rank 0's decision.
struct RunStart {
  RunStart(RunConfig& config, dist::Communicator* world_comm, TrainResult& run_result);
  RunStart(const RunStart&) = delete;
  RunStart& operator=(const RunStart&) = delete;

  RunConfig& cfg;
  dist::Communicator* world;
  TrainResult& result;
  // This rank's groups of the layout (null: one process). The engine takes them whole.
  std::optional<dist::Mesh> mesh;
  // The data-parallel rank picks the rows; the ranks of one pipeline read the same rows.
  const int rank, ranks;
  const int world_size;
  // World rank 0 alone prints and writes the run folder; every rank computes.
  const bool leader;
  const Clock::time_point run_start;

  data::Dataset dataset;
  const RunMemory run_memory;
  const int T;
  const int micro;
  const int accumulation;
  data::TokenLoader loader;

  // The run folder: rank 0 locks it and decides where the run starts; every rank learns that.
  std::optional<RunFolder> folder;
  CheckpointStore checkpoints;
  std::string start_note, resume_path;
  // The config the checkpoint was saved with: what the resumed run changes of it is said, and
  // a change of the optimization is refused unless train.allow_changes.
  std::optional<RunConfig> saved_config;
  std::string changes_note;
  // The resumed checkpoint is at train.steps already (result says so).
  bool nothing_to_do = false;

 private:
  void choose_where_to_start();
  void check_resumed_config();
};

// One rank's model and engine, and the run's phases over them. Collective over `world`.
class TrainingRun {
 public:
  TrainingRun(RunStart& run_start, StopSignals* stop_signals);
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  void restore();
  void announce();
  void train();
  void finish();

 private:
  // restore()
  void init_from_weights();
  void resume_checkpoint();
  // announce()
  void print_model_and_data();
  void print_layout();
  void print_execution();
  // train()
  struct Steps;
  struct EngineCall;
  struct StepSums;
  int64_t steps_until_drained(int64_t from) const;
  Steps next_batches(int64_t count);
  EngineCall call_engine(const Steps& steps, Profiler* profiling);
  StepSums exchange_sums(const EngineCall& call, int64_t count) const;
  void log_steps(const Steps& steps, const EngineCall& call, const StepSums& sums, double seconds);
  void note_skipped_or_scaled(const parallel::TrainingEngine::StepResult& r, bool last_of_call);
  std::string stop_reason(const StepSums& sums) const;
  void after_steps(bool last, bool signalled);
  // What the steps and the end of the run do with the newest weights.
  double evaluate();
  std::string sample();
  std::string save();
  void draw_chart();
  void message(const std::string& text);

  RunStart& start;
  RunConfig& cfg;
  dist::Communicator* world;
  StopSignals* stop;
  TrainResult& result;
  const bool leader;
  const int rank, ranks, world_size;
  const int T, micro, accumulation;
  data::Dataset& dataset;
  data::TokenLoader& loader;

  MemoryAccountant memory;
  // This rank's blocks of the parameters under tensor parallelism (none split at tp 1).
  const parallel::TensorParallelPlan tensor_plan;
  const parallel::ExpertParallelPlan expert_plan;
  nn::GPT model;
  // The float products' library, chosen (by measurement on the model's products unless
  // precision.f32_gemm names one) before the engine, whose planning may time the model, exists.
  const FloatGemmChoice float_gemm;
  // The nvme tier: this rank's scratch folder, removed when the run ends.
  std::optional<OffloadFolder> offload;
  parallel::EngineOptions engine_settings;
  std::optional<memory::DiskBandwidth> disk;
  parallel::TrainingEngine engine;
  optim::WarmupCosine schedule;
  const std::string tokenizer_path;

  // The whole model's, whatever share of it this rank holds under tensor, pipeline or expert
  // parallelism: MFU divides the model's FLOPs by every process's time and peak, so it reads the
  // same under every layout.
  const int64_t N;
  // A token reads k of an MoE block's E experts: the MFU counts the parameters it reads.
  const int64_t active;
  const double flops_per_token;
  const int64_t tokens_per_step;
  // An epoch is every training window once (data/loader.h): steps × batch_size sequences of them.
  const double windows;
  const double planned_epochs;

  // restore()
  int64_t step = 0;
  std::vector<double> val_history;
  double checkpoint_elapsed = 0;  // the run's wall time up to the resumed checkpoint (0: not recorded)
  std::string streamed_load_note;  // how the checkpoint went into the nvme tier, for the resume line

  // announce()
  std::optional<io::MetricsLog> metrics;
  RunHistory history;
  double elapsed_before = 0;
  MatmulPeak peak;

  // train()
  int64_t eval_sequences = 0;
  std::optional<data::TokenLoader> val;
  std::optional<Progress> progress;
  data::RowRange my_rows{};
  exec::TimelineRecorder timeline;
  bool timeline_pending = false;
  std::optional<RunProfile> profile;
  bool two_versions = false;
};

}  // namespace tessera::train
