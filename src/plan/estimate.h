#pragma once
// The cost model's answer for one layout: memory per rank by category, time per step by cause,
// and the resulting throughput (TFLOP/s per device, MFU).
#include <cstdint>

#include "config/model_config.h"
#include "plan/cluster.h"
#include "plan/layout.h"
#include "plan/memory_model.h"
#include "plan/model_costs.h"
#include "plan/pipeline_model.h"

namespace tessera::plan {

struct TimeBreakdown {
  double compute = 0;    // matmuls and bandwidth-bound kernels of the slowest stage, all microbatches
  double tp_comm = 0;    // tensor-parallel collectives of that stage (on the critical path)
  double pp_comm = 0;    // pipeline sends and receives on the critical path
  double bubble = 0;     // pipeline fill and drain: makespan minus the three above
  double dp_comm = 0;    // exposed data-parallel / ZeRO communication and the tied-embedding sync
  double optimizer = 0;  // the optimizer step on the rank's shard (bandwidth-bound)
  double io = 0;         // nvme-tier transfers the compute does not hide (plan/offload_io.h; a run's plan only)
  double step = 0;       // the sum: seconds per optimizer step
};

struct Estimate {
  Layout layout;
  RankMemory memory;           // worst stage
  double memory_capacity = 0;  // usable bytes per device
  bool fits = false;
  TimeBreakdown time;
  StageTimes microbatch;       // one microbatch on the slowest stage: forward, backward (tp comm included), transfer
  StepFlops flops;             // whole model, whole global batch
  double tflops_per_device = 0;  // hardware FLOPs (recompute included, as Narayanan et al. count) / step / devices / 1e12
  double mfu = 0;                // model FLOPs (no recompute) / (step x devices x peak)
  double hfu = 0;                // hardware FLOPs / (step x devices x peak)
  double tokens_per_second = 0;
  double bubble_fraction = 0;    // bubble / (compute + tp + pp communication): idle share of the ideal time
};

// Checks the layout (throws on a bad one) and predicts it. `pipeline` supplies the schedule's
// makespan and in-flight counts (closed forms unless a simulator is given).
Estimate estimate(const config::ModelConfig& m, const Layout& l, const ClusterSpec& c,
                  const PipelineModel& pipeline = closed_form_pipeline());

// Memory only (cheap): used by the planner to skip layouts that cannot fit before timing them.
RankMemory estimate_memory(const config::ModelConfig& m, const Layout& l, const PipelineModel& pipeline = closed_form_pipeline());

}  // namespace tessera::plan
