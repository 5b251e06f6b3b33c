#pragma once
// `tessera plan --config`: the run a `tessera train` config describes, as the cost model sees it.
#include <string>

#include "config/model_config.h"
#include "plan/layout.h"
#include "train/run_config.h"

namespace tessera::cli {

struct PlannedRun {
  config::ModelConfig model;  // model.*, its vocabulary taken from the dataset when not given
  plan::Layout layout;        // parallel.*, the batch, memory.*, precision.compute, optim.name
  // Set when the run's stages are not the even split the cost model takes: what to tell the user.
  std::string split_note;
};

// The model and layout of `config`, in this engine's accounting (activations and states = engine)
// and with its tiled attention (flash). Reads data.dir/data.json when model.vocab_size is not set,
// as the trainer does. Throws naming the key when the run uses what the cost model does not describe.
PlannedRun planned_run(train::RunConfig config);

}  // namespace tessera::cli
