#pragma once
// The training loop: it assembles the parts (dataset, model, training engine, checkpoints,
// metrics, progress) from one RunConfig and runs steps — the schedule's program of microbatches
// (gradient accumulation, recomputation) through the interpreter, the global norm, the optimizer
// of optim.name with warmup + cosine — with periodic evaluation on the validation split, text samples and checkpoints.
//
// Data parallelism: started under MPI with a world of parallel.dp ranks, each rank trains on its
// shard of every global batch (ZeRO stage parallel.zero_stage). Rank 0 alone prints, holds the
// run folder's lock and writes metrics, the chart and the config; every rank writes its shard of
// a checkpoint.
//
// A run ends in one of three ways (the program's exit codes in README): finished (train.steps
// reached, or nothing to do when resuming a finished run), stopped early with a checkpoint
// (train.exit_after, train.max_minutes, or a stop signal), or an error (an exception).
//
// The run's phases, one function each (where it starts, the engine, restore, the start lines, the
// step loop, the end), are in train/training_run.h.
#include <string>
#include <vector>

#include "core/stop_signals.h"
#include "dist/communicator.h"
#include "train/run_config.h"

namespace tessera::nn {
class GPT;
class ParameterAccess;
}  // namespace tessera::nn
namespace tessera::parallel {
struct EngineOptions;
class TrainingEngine;
}  // namespace tessera::parallel

namespace tessera::train {

struct ModelState;
struct CheckpointState;
class CheckpointStore;
struct LoadedCheckpoint;
struct LoadedWeights;

// The training engine's settings of a run (all but the nvme tier's folder, which the run makes).
parallel::EngineOptions engine_options(const RunConfig& cfg);
// What a checkpoint saves of a run and loads into it: the parameters' values through `values`
// (see save_run_checkpoint and load_run_checkpoint), the engine's optimizer state and which of it
// this rank writes.
ModelState model_state(nn::GPT& model, parallel::TrainingEngine& engine, nn::ParameterAccess& values);
// Saves a run's checkpoint into `store`, as the training loop does (collective over `world`): the
// parameters through the engine's read_only_parameters(), one at a time from the nvme tier where
// ZeRO-3's shard lives there (over several ranks each gathered as the model file is written), and
// the optimizer state chunk by chunk where it is offloaded; so a state larger than RAM is saved.
std::string save_run_checkpoint(const CheckpointStore& store, const RunConfig& cfg, const CheckpointState& state,
                                nn::GPT& model, parallel::TrainingEngine& engine, const std::string& tokenizer_path,
                                dist::Communicator* world);
// Loads the checkpoint at `path` into a run's model and engine, as resuming does (collective over
// `world`): the parameters through the engine's writable_parameters(), one at a time into the
// nvme tier where ZeRO-3's shard lives there (every rank reads each and keeps its part), and the
// optimizer state, chunk by chunk where it is offloaded; so a run whose state is larger than RAM
// resumes.
LoadedCheckpoint load_run_checkpoint(const std::string& path, const RunConfig& cfg, nn::GPT& model,
                                     parallel::TrainingEngine& engine, dist::Communicator* world);
// Loads the weights alone of `checkpoint` into a run's model (train.init_from; collective over the
// engine's groups), through writable_parameters() as load_run_checkpoint does.
LoadedWeights load_run_weights(const std::string& checkpoint, const RunConfig& cfg, nn::GPT& model,
                               parallel::TrainingEngine& engine);

struct TrainResult {
  enum class Outcome { Finished, NothingToDo, StoppedEarly };
  Outcome outcome = Outcome::Finished;
  std::string stop_reason;         // StoppedEarly: what stopped it; NothingToDo: why
  int64_t first_step = 0;          // where this run started (0, or the resumed step)
  int64_t steps = 0;               // steps completed in total
  std::vector<double> losses;      // training loss of each step this run took
  double val_loss = 0;             // last evaluation
  int64_t val_step = -1;           // the step it was measured at; -1: none in this process
  double unigram_entropy = 0;      // nats: the loss of predicting tokens by their frequency alone
  std::string run_dir, metrics_path, chart_path, checkpoint_path, sample_text;
};

// What the start line warns of the data's size: a vocabulary too large for the training tokens, a
// run that reads them many times (`epochs`).
std::vector<std::string> data_size_warnings(const RunConfig& cfg, int64_t train_tokens, double epochs);

// Refuses a layout whose processes are not `world_size`, naming the launch that fits.
void check_world_size(const RunConfig& cfg, int world_size);

class Trainer {
 public:
  // `world`: every process of the job (must outlive the trainer), or null for one process alone.
  // `stop`: asks the run to stop at the next step boundary with a checkpoint (the ranks agree on
  // the step), and hears when a checkpoint is being written. Null: never.
  explicit Trainer(RunConfig config, dist::Communicator* world = nullptr, StopSignals* stop = nullptr);
  // Collective over `world`.
  TrainResult run();

 private:
  RunConfig config_;
  dist::Communicator* world_;
  StopSignals* stop_;
};

}  // namespace tessera::train
