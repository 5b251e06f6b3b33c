#pragma once
// The deadlock validator: proves a schedule can be executed before anything runs it.
//
// It checks, from the lists alone (no costs):
//  - every instruction is well formed (its stage lives on its rank, the peer is the neighbour
//    stage's rank, indices in range);
//  - on each rank, data is there before it is used: a forward after its input arrived (or the
//    previous stage ran on the same rank), a backward after its forward and the gradient from the
//    next stage, a weight-gradient after its input-gradient, a send after the compute that made
//    its tensor;
//  - every Send has exactly one matching Recv and the reverse;
//  - no rank waits forever, under the strictest semantics an executor may use: a Send blocks until
//    the peer reaches the matching Recv and vice versa (rendezvous). A deadlock names every stuck
//    rank and the instruction it is stuck on;
//  - every microbatch runs forward and backward exactly once on every stage, forward first, and its
//    gradient reaches every stage exactly once;
//  - optimizer steps: after all of their step's backwards (flushing schedules), and weight
//    versions consistent (a microbatch's forward and backward read the same version, never one not
//    yet produced; PipeDream-2BW keeps at most two alive per stage).
// It also reports the peak number of microbatches whose activations are alive, per stage and rank.
#include <string>
#include <vector>

#include "schedule/instruction.h"

namespace tessera::pipeline {

struct ValidationReport {
  std::vector<std::string> problems;  // empty when valid; each names rank, position and instruction
  int transfers = 0;                  // matched Send/Recv pairs
  // Microbatches alive (forward done, backward or weight-gradient not yet) at the worst moment:
  std::vector<int> peak_alive_per_stage;  // [stage]
  std::vector<int> peak_alive_per_rank;   // [rank], (chunk, microbatch) units over all chunks
  std::vector<int> peak_weight_versions;  // [stage]: distinct weight versions alive at once

  bool ok() const { return problems.empty(); }
  std::string summary() const;  // "valid: ..." or the problems, one per line
};

ValidationReport validate(const Schedule& schedule);

// validate() that throws tessera::Error with every problem when the schedule is not valid.
ValidationReport check_valid(const Schedule& schedule);

}  // namespace tessera::pipeline
