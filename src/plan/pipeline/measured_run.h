#pragma once
// A measured pipeline step (schedule/measured_timeline.h) next to the simulation of the
// same schedule with the costs it measured: both bubbles, the costs, and one drawing of both.
//
// Bubble: the simulator's definition (simulator.h), applied to the records. Per rank, idle time
// over the step's total time, averaged over the ranks; busy is the time in compute instructions
// (forward, backward or its input and weight halves), idle everything else, waiting for a transfer
// included; the step runs from 0 to the end of the last compute instruction. The optimizer step is
// left out on both sides: the simulator gives it no time, and the measured one holds collectives
// (tied-embedding gradients, the global norm, data-parallel reductions) whose waiting belongs to
// no schedule.
//
// Costs fed to the simulator, all from the record itself:
//   forward[s], backward[s], weight[s]  medians over the microbatches of stage s's records; with a
//                                       split backward, backward = median(B) + median(W)
//   p2p                                 median over the exposed transfers of (end of the receive −
//                                       start of the send); exposed: the receiver was already
//                                       waiting when the send was posted, so the interval is the
//                                       transfer itself. 0 when every transfer was hidden.
// Transfers run async (isend/irecv), as the executor posts them.
#include <string>
#include <vector>

#include "schedule/instruction.h"
#include "schedule/measured_timeline.h"
#include "plan/pipeline/simulator.h"
#include "plan/pipeline/timeline.h"

namespace tessera::plan {

struct MeasuredBubble {
  double total = 0;                     // seconds: when the last compute instruction ended
  std::vector<double> busy;             // [rank] seconds in compute instructions
  std::vector<double> bubble_per_rank;  // [rank] idle / total
  double fraction = 0;                  // mean over ranks
};
MeasuredBubble measured_bubble(const pipeline::MeasuredTimeline& timeline);

struct MeasuredCosts {
  PipelineCosts costs;          // seconds, for simulate_schedule
  int transfers = 0;            // received tensors in the step
  int exposed_transfers = 0;    // of which the p2p time is the median
};
MeasuredCosts measured_costs(const pipeline::MeasuredTimeline& timeline, const pipeline::Schedule& schedule);

struct MeasuredComparison {
  pipeline::Schedule schedule;
  MeasuredBubble measured;
  MeasuredCosts costs;
  SimulationResult simulated;  // the schedule played with `costs`
};
// Checks that the records follow their schedule (pipeline::check_follows) first.
MeasuredComparison compare_with_simulation(const pipeline::MeasuredTimeline& timeline);

// The measured ranks above the simulated ones, on one axis in milliseconds. Compute instructions
// and optimizer steps are boxes; time spent waiting for a transfer is left idle (hatched), as the
// bubble counts it.
Timeline comparison_timeline(const pipeline::MeasuredTimeline& timeline, const MeasuredComparison& comparison);

// What `tessera simulate --timeline` prints: per-stage costs, both bubbles and totals, per rank.
std::string comparison_report(const MeasuredComparison& comparison);

}  // namespace tessera::plan
