#pragma once
// The training loop: it assembles the parts (dataset, model, optimizer, checkpoints, metrics,
// progress) from one RunConfig and runs steps of
//   microbatches (gradient accumulation) → clip by the global norm → AdamW with warmup + cosine
// with periodic evaluation on the validation split, text samples and checkpoints.
//
// Data parallelism: started under MPI with a world of parallel.dp ranks, each rank trains on its
// shard of every global batch through parallel::DataParallel (ZeRO stage parallel.zero_stage).
// Rank 0 alone prints and writes metrics, the chart and the config; every rank writes its shard
// of a checkpoint.
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "train/run_config.h"

namespace tessera::train {

struct TrainResult {
  int64_t first_step = 0;          // where this run started (0, or the resumed step)
  int64_t steps = 0;               // steps completed in total
  std::vector<double> losses;      // training loss of each step this run took
  double val_loss = 0;             // last evaluation
  double unigram_entropy = 0;      // nats: the loss of predicting tokens by their frequency alone
  std::string run_dir, metrics_path, chart_path, checkpoint_path, sample_text;
};

class Trainer {
 public:
  // `world`: every process of the job (must outlive the trainer), or null for one process alone.
  explicit Trainer(RunConfig config, dist::Communicator* world = nullptr);
  // Collective over `world`.
  TrainResult run();

 private:
  RunConfig config_;
  dist::Communicator* world_;
};

}  // namespace tessera::train
