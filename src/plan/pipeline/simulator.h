#pragma once
// Pipeline simulator: plays a schedule's instruction lists with given costs and reports each
// rank's timeline, the total time, the bubble and the peak activation memory.
//
// Time model. Each rank runs its list in order, one instruction at a time. A compute instruction
// takes its stage's cost. Transfers follow one of two executor models:
//  - Async (default): a Send or Recv is posted when reached and does not hold the rank; the tensor
//    arrives p2p after both halves are posted, and the compute that consumes it waits for it
//    (isend/irecv, as Megatron and NCCL executors run).
//  - Blocking: a Send and its Recv both wait until the other is reached, then both ranks spend p2p
//    on the transfer (plain blocking send/recv).
// With zero p2p and uniform costs, Async reaches the dataflow optimum of the lists' compute order.
// Blocking matches it wherever neighbouring ranks have a common free moment between producing and
// consuming each tensor (every generated shape except some interleaved ones); it is never faster.
//
// Memory model. A microbatch's activations on a stage occupy `activation[stage]` units from the
// start of its forward to the end of its backward (of its weight-gradient part when split). With
// recompute, only `stashed_fraction` of them stay between forward and recompute. One unit is one
// microbatch's activations of a whole rank, so uniform_costs gives each of v chunks 1 / v.
#include <vector>

#include "schedule/instruction.h"

namespace tessera::plan {

enum class TransferMode { Async, Blocking };

struct PipelineCosts {
  std::vector<double> forward;     // [stage] one microbatch's forward
  std::vector<double> backward;    // [stage] full backward: input gradient plus weight gradient
  std::vector<double> weight;      // [stage] the weight-gradient share of backward (W when split)
  std::vector<double> recompute;   // [stage] one recomputed forward
  std::vector<double> activation;  // [stage] memory units alive per microbatch
  double stashed_fraction = 0.0;   // of activation kept between forward and recompute
  double optimizer = 0.0;          // one optimizer step of one chunk
  double p2p = 0.0;                // one transfer of one tensor between neighbour ranks
  TransferMode mode = TransferMode::Async;
};

// Same costs on every stage. forward, backward and weight are per microbatch for a rank's whole
// share of the model (so each of v chunks costs 1 / v of them); weight <= backward.
PipelineCosts uniform_costs(const pipeline::Schedule& schedule, double forward, double backward, double weight,
                            double p2p = 0.0);

struct TimedInstruction {
  std::size_t index = 0;  // position in the rank's list
  double start = 0.0;
  double end = 0.0;
};

struct SimulationResult {
  std::vector<std::vector<TimedInstruction>> timeline;  // [rank]: every instruction, in list order
  double total_time = 0.0;                              // when the last rank finishes
  std::vector<double> busy;                             // [rank]: time spent computing
  std::vector<double> bubble_per_rank;                  // [rank]: idle / total
  double bubble_fraction = 0.0;                         // mean over ranks of idle / total
  std::vector<double> peak_activation;                  // [rank]: memory units
  std::vector<double> peak_activation_per_stage;        // [stage]
  std::vector<int> peak_alive;                          // [rank]: (chunk, microbatch) units at once
};

// Throws tessera::Error on bad costs, or when the lists do not pass pipeline::validate.
SimulationResult simulate_schedule(const pipeline::Schedule& schedule, const PipelineCosts& costs);

}  // namespace tessera::plan
