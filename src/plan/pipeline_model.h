#pragma once
// How the pipeline schedule enters the cost model: the step's makespan given per-stage times, and
// how many model chunks' activations a stage holds at its peak. Both read the pipeline from the
// layout: p = pp, v = virtual_stages, m = microbatches(), the kind = schedule. Closed forms live
// here; a schedule simulator can be plugged in through PipelineModel without touching the rest.
#include <cstdint>
#include <functional>
#include <string>

#include "config/parallel_layout.h"

namespace tessera::plan {

// Times of one microbatch on the slowest stage: forward and backward over all of its chunks
// (tensor-parallel communication and recompute included), and one point-to-point transfer of a
// boundary activation (or its gradient) between neighbouring chunks.
struct StageTimes {
  double forward = 0;
  double backward = 0;
  double p2p = 0;
};

struct PipelineModel {
  std::string name;
  // Seconds from the first forward to the last backward of a step.
  std::function<double(const config::ParallelLayout&, const StageTimes&)> makespan;
  // Chunk-microbatches whose activations stage `stage` holds at once, at its peak.
  std::function<int64_t(const config::ParallelLayout&, int stage)> inflight_chunks;
};

// The cost model describes 1F1B, interleaved 1F1B, GPipe and ZB-H1 (its backward's weight half taken
// as half of it). PipeDream-2BW would need a second weight version in memory, which it does not
// count: throws naming `tessera simulate` for it.
void check_modeled_schedule(config::ScheduleKind kind);

// Closed forms (Narayanan et al. 2021; Huang et al. 2019):
//   p = 1:        m (t_f + t_b)
//   1F1B / interleaved: (m + (p - 1)/v) (t_f + t_b + 2 v t_p2p): bubble (p - 1)/(v m) of the ideal time
//   GPipe:        (m + p - 1) (t_f + t_b + 2 t_p2p)
//   ZB-H1 (m >= p): m (t_f + t_b + 2 t_p2p) + (p - 1)(t_f + 2 t_p2p), the weight half t_b / 2
//                 (Qi et al. 2023: idle (p - 1)(t_F + t_B - t_W)); below p microbatches, 1F1B's
// In flight at stage r (Megatron's warm-up counts, plus the one in steady state):
//   1F1B and ZB-H1: min(p - r, m); interleaved: min(2 (p - r - 1) + (v - 1) p + 1, v m) chunks;
//   GPipe: m.
PipelineModel closed_form_pipeline();
double closed_form_makespan(const config::ParallelLayout& layout, const StageTimes& times);
int64_t closed_form_inflight_chunks(const config::ParallelLayout& layout, int stage);
// The idle fraction of the ideal time: (p - 1)/(v m) for 1F1B, (p - 1)/m for GPipe, (p - 1)/(3 m)
// for ZB-H1 (t_b = 2 t_f).
double closed_form_bubble_fraction(const config::ParallelLayout& layout);

}  // namespace tessera::plan
