#pragma once
// Shared by the generators: they decide only the order of compute on each rank; this part turns
// that order into executable lists by placing every Send and Recv.
//
// Placement rule. The compute order is played once with nominal integer costs (F = 1, B = 2, or
// B = W = 1 when split) as pure dataflow. Every cross-rank tensor becomes one transfer event, timed
// at the moment its producer finishes. All compute and transfer events are sorted into one global
// sequence (by time; at equal times transfers first), and each rank's list is that sequence
// restricted to the rank. So a Send directly follows the compute that made its tensor, whatever
// the real costs: an executor that posts sends without waiting (isend, as this one does) hands every
// tensor over as soon as it exists, and the receiver's compute waits only for real dataflow. The
// Recv lands before the receiver's first compute starting at or after that moment, so it is posted
// early too. Because every list is a projection of one sequential execution in which each Send
// meets its Recv at once, the lists cannot deadlock even when every Send blocks until its Recv is
// posted; the validator checks this independently. A blocking executor may wait at such a Send for
// the receiver to finish the compute it is in; the simulator's blocking mode shows what that costs.
#include <vector>

#include "schedule/instruction.h"

namespace tessera::pipeline {

// A schedule of `kind` with its fields set from the layout and options (after check_layout_for)
// and one empty list per rank.
struct GeneratorOptions;
Schedule start_schedule(ScheduleKind kind, const config::ParallelLayout& layout, const GeneratorOptions& options);

// Appends a compute instruction for `stage` (chunk derived) to `order`.
void push_compute(std::vector<Instruction>& order, const Schedule& schedule, Op op, int stage, int microbatch,
                  int weight_version = 0);

// Appends one OptimizerStep per chunk of `rank`, each producing weight version `version`.
void push_optimizer_steps(std::vector<Instruction>& order, const Schedule& schedule, int rank, int version);

// Adds Recompute before each backward when schedule.recompute, then replaces schedule.programs
// (compute only on entry) by the full lists with transfers. Throws if the compute order cannot run
// (a generator bug: some compute waits on data that is never produced).
void place_transfers(Schedule& schedule);

}  // namespace tessera::pipeline
