#pragma once
// The run a `tessera train` config describes, as the cost model sees it: what `tessera plan
// --config` plans, and the memory peak the trainer's start line states and checks against the
// machine before it allocates anything.
#include <string>
#include <vector>

#include "config/model_config.h"
#include "plan/layout.h"
#include "plan/memory_model.h"
#include "train/run_config.h"

namespace tessera::train {

struct PlannedRun {
  config::ModelConfig model;  // model.*, its vocabulary taken from the dataset when not given
  plan::Layout layout;        // parallel.*, the batch, memory.*, precision.compute, optim.name
  // Set when the run's stages are not the even split the cost model takes: what to tell the user.
  std::string split_note;
};

// The gradient shard's bytes through the nvme tier per step, when it lives there: written by each
// microbatch's reduction and read back by every one after the first, beside the backward; read by
// the optimizer step.
struct GradientTraffic {
  double written_in_backward = 0;
  double read_in_backward = 0;
  double read_in_step = 0;
};

// The model and layout of `config`, in this engine's accounting (activations and states = engine)
// and with its tiled attention (flash). Reads data.dir/data.json when model.vocab_size is not set,
// as the trainer does. Throws naming the key when the run uses what the cost model does not describe.
PlannedRun planned_run(RunConfig config);

// A run's memory per process, as its allocator counts it (plan/engine_memory.h), for a rank of
// each pipeline stage: each tag's own peak, and the peak of every tag at once — what a step's
// "memory" line of metrics.jsonl calls "peak". The states (parameters, gradients, optimizer,
// working copies) hold all step long; activations and workspace rise and fall with the program's
// actions and are walked action by action (exec::predict_transient_peak); the communication
// buffers are taken at their peak beside them.
struct PredictedMemory {
  std::vector<plan::MemoryBreakdown> tags;  // [stage]
  std::vector<double> peak;                 // [stage]
  std::vector<double> nvme;                 // [stage]: the most the nvme tier holds at once
  std::vector<double> nvme_traffic;         // [stage]: activation bytes written to the nvme tier per step (each read back once)
  std::vector<double> nvme_optimizer_traffic;  // [stage]: optimizer-state (and offloaded master value) bytes read and written back in the step
  std::vector<double> nvme_parameter_reads;    // [stage]: offloaded parameter bytes read for the units' gathers per step
  std::vector<GradientTraffic> nvme_gradient_traffic;  // [stage]: zero where the gradients are in memory
  int worst = 0;                            // the stage whose peak is highest
};
PredictedMemory predict_memory(const RunConfig& config, const PlannedRun& run);

}  // namespace tessera::train
