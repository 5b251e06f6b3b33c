#pragma once
// The training loop: it assembles the parts (dataset, model, optimizer, checkpoints, metrics,
// progress) from one RunConfig and runs steps of
//   microbatches (gradient accumulation) → clip by the global norm → AdamW with warmup + cosine
// with periodic evaluation on the validation split, text samples and checkpoints.
#include <string>
#include <vector>

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
  explicit Trainer(RunConfig config);
  TrainResult run();

 private:
  RunConfig config_;
};

}  // namespace tessera::train
