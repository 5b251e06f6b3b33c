#include "train/trainer.h"

#include <filesystem>

#include "parallel/training_engine.h"
#include "train/checkpoint.h"
#include "train/training_run.h"

namespace tessera::train {

parallel::EngineOptions engine_options(const RunConfig& cfg) {
  parallel::EngineOptions o;
  o.layout = cfg.layout();
  o.bucket_bytes = static_cast<int64_t>(static_cast<double>(cfg.parallel.bucket_mb) * 1048576.0);
  o.optimizer = cfg.optim;  // the optimizer part of optim.*
  o.seq_len = cfg.model.seq_len;
  o.stage_layers = cfg.parallel.stage_layers;
  o.two_bw_versions = pipeline::parse_two_bw_versions(cfg.parallel.weight_version);
  o.compression = cfg.compression_options();
  o.precision = cfg.precision_options();
  o.recompute.policy = cfg.memory.recompute;
  o.recompute.every_k = cfg.memory.recompute_every;
  o.recompute.budget_bytes = static_cast<int64_t>(static_cast<double>(cfg.memory.activation_budget_mb) * 1048576.0);
  o.recompute.offload = exec::parse_activation_offload(cfg.memory.offload_activations);
  o.recompute.solver_seconds = cfg.memory.solver_seconds;
  // In the run folder, so that a resumed run reads the schedule its first start solved.
  o.recompute.solver_cache_dir = std::filesystem::path(cfg.train.out_dir) / "remat-cache";
  o.activation_encoding = exec::parse_activation_encoding(cfg.memory.activation_encoding);
  o.delayed_update_after = cfg.optim.delayed_update_after;
  o.delayed_update_extrapolate = cfg.optim.delayed_update_extrapolate;
  if (cfg.memory.offload_optimizer == "nvme") {
    o.offload_optimizer_chunk_bytes = static_cast<int64_t>(static_cast<double>(cfg.memory.offload_chunk_mb) * 1048576.0);
  }
  o.offload_params = cfg.memory.offload_params == "nvme";
  return o;
}

ModelState model_state(nn::GPT& model, parallel::TrainingEngine& engine, nn::ParameterAccess& values) {
  ModelState state{model.parameters(), values, &engine.optimizer(), engine.data_parallel().owned()};
  state.rank_state = engine.rank_local_state();
  if (engine.pipeline() != nullptr) {
    state.pipeline_rank = engine.pipeline()->rank();
    if (engine.data_parallel().zero_stage() == 0) state.stage_params = engine.optimizer_parameters();
    state.writes_stage = engine.data_parallel().rank() == 0;
  }
  if (engine.tensor_parallel() != nullptr) {
    state.tensor_parallel = engine.tensor_parallel();
    state.writes_stage = engine.data_parallel().rank() == 0;
  }
  state.expert_parallel = engine.expert_parallel();
  state.segments = engine.ownership().master_segments();
  const bool sharded_by_zero = engine.data_parallel().zero_stage() >= 1;
  for (const nn::Parameter& p : model.parameters().all()) {
    state.writes_master.push_back(engine.writes_checkpoint_of(p, sharded_by_zero));
    state.writes_previous.push_back(engine.writes_checkpoint_of(p, false));
  }
  if (parallel::WeightVersions* versions = engine.weight_versions()) {
    state.previous_weights = versions->previous();
    state.previous_weights_rank = engine.pipeline() != nullptr ? engine.pipeline()->rank() : 0;
    state.tensor_parallel = engine.tensor_parallel();
    state.writes_previous_weights = engine.data_parallel().rank() == 0;
  }
  return state;
}

std::string save_run_checkpoint(const CheckpointStore& store, const RunConfig& cfg, const CheckpointState& state,
                                nn::GPT& model, parallel::TrainingEngine& engine, const std::string& tokenizer_path,
                                dist::Communicator* world) {
  parallel::DataParallel::ReadOnlyParameters values =
      engine.read_only_parameters(parallel::DataParallel::ReadOrder::EachOnceInStoreOrder);
  ModelState saved = model_state(model, engine, values);
  saved.values_read_together = values.read_together();
  return store.save(cfg, state, saved, tokenizer_path, world);
}

LoadedCheckpoint load_run_checkpoint(const std::string& path, const RunConfig& cfg, nn::GPT& model,
                                     parallel::TrainingEngine& engine, dist::Communicator* world) {
  parallel::DataParallel::WritableParameters into = engine.writable_parameters();
  ModelState state = model_state(model, engine, into);
  state.sink = &into;
  LoadedCheckpoint loaded = load_checkpoint(path, cfg, state, world);
  into.finish();
  loaded.parameters_one_at_a_time = into.one_at_a_time();
  return loaded;
}

LoadedWeights load_run_weights(const std::string& checkpoint, const RunConfig& cfg, nn::GPT& model,
                               parallel::TrainingEngine& engine) {
  parallel::DataParallel::WritableParameters into = engine.writable_parameters();
  ModelState weights{model.parameters(), into};
  weights.sink = &into;
  LoadedWeights loaded = load_weights(checkpoint, cfg.model, weights);
  into.finish();
  return loaded;
}

std::vector<std::string> data_size_warnings(const RunConfig& cfg, int64_t train_tokens, double epochs) {
  std::vector<std::string> warnings;
  // A piece the tokenizer learned from a handful of occurrences is one the model sees too rarely
  // to learn; below ~50 training tokens per piece most pieces are such.
  constexpr double kTokensPerPiece = 50;
  const double per_piece = static_cast<double>(train_tokens) / cfg.model.vocab_size;
  if (per_piece < kTokensPerPiece) {
    int64_t fits = 256;
    while (static_cast<double>(fits) * 2 * kTokensPerPiece <= static_cast<double>(train_tokens)) fits *= 2;
    warnings.push_back(fmt::format(
        "a vocabulary of {} pieces on {} training tokens is {:.1f} tokens per piece, fewer than the ~{:g} that let "
        "the model learn most pieces; prepare the data with a smaller --vocab-size (about {}), or give it more text",
        cfg.model.vocab_size, train_tokens, per_piece, kTokensPerPiece, fits));
  }
  // Past a few passes a model of this size memorizes the corpus: validation loss rises.
  constexpr double kManyEpochs = 4;
  if (epochs > kManyEpochs) {
    warnings.push_back(fmt::format(
        "{} steps read the training tokens {:.3g} times (epochs): past ~{:g} the model memorizes them and the "
        "validation loss rises; train fewer steps (train.steps) or on more text",
        cfg.train.steps, epochs, kManyEpochs));
  }
  return warnings;
}

void check_world_size(const RunConfig& cfg, int world_size) {
  const config::ParallelLayout layout = cfg.layout();
  try {
    layout.validate_world(world_size);
  } catch (const Error& e) {
    TS_FAIL("{}. tessera train runs parallel.dp × parallel.tp × parallel.pp processes: start it with `tessera launch "
            "-n {} -- train ...` (or mpirun -n {}), or set parallel.dp × parallel.tp × parallel.pp = {}",
            e.what(), layout.world_size(), layout.world_size(), world_size);
  }
}

Trainer::Trainer(RunConfig config, dist::Communicator* world, StopSignals* stop)
    : config_(std::move(config)), world_(world), stop_(stop) {}

TrainResult Trainer::run() {
  TrainResult result;
  RunStart start(config_, world_, result);
  if (start.nothing_to_do) return result;
  TrainingRun run(start, stop_);
  run.restore();
  run.announce();
  run.train();
  run.finish();
  return result;
}

}  // namespace tessera::train
