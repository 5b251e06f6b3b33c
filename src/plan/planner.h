#pragma once
// The planner: every layout of a model on N devices of a cluster with a global batch B, filtered
// by memory, ranked by predicted step time.
#include <cstdint>
#include <vector>

#include "plan/estimate.h"

namespace tessera::plan {

struct PlanRequest {
  int64_t devices = 1;
  int64_t global_batch = 1;
  Precision precision = Precision::Bf16;
  bool flash_attention = false;
  ActivationAccounting activations = ActivationAccounting::Engine;  // whose saved tensors (layout.h)
  bool overlap = false;        // data-parallel / ZeRO communication overlaps compute
  int top = 5;                 // how many layouts to return
  int max_micro_batch = 64;    // largest microbatch tried
};

struct PlanResult {
  std::vector<Estimate> best;  // fastest first (ties: less memory first)
  int64_t considered = 0;      // valid layouts enumerated
  int64_t fitting = 0;         // of which fit in memory
};

// Search space: tp over the divisors of N that divide the heads and FFN size; pp over the divisors
// of N/tp that divide the layers; dp = N/(tp pp) dividing B; microbatch over the divisors of B/dp
// up to max_micro_batch; v over the divisors of the layers per stage (interleaving needs the
// microbatch count to be a multiple of pp); sp on and off when tp > 1; ZeRO 0-1 (0-3 without
// pipeline parallelism, 0 without data parallelism); recompute none, selective, full (every_k and
// optimal are for --layout: planner.cpp says why).
// Throws when the request is malformed or when no layout fits, naming the smallest one found.
PlanResult plan_layouts(const config::ModelConfig& m, const ClusterSpec& c, const PlanRequest& request,
                const PipelineModel& pipeline = closed_form_pipeline());

}  // namespace tessera::plan
