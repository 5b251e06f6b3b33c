#pragma once
// Turns a simulated schedule into the generic timeline the drawing code takes.
#include <string>

#include "schedule/instruction.h"
#include "plan/pipeline/simulator.h"
#include "plan/pipeline/timeline.h"

namespace tessera::plan {

// How the simulation's times are shown: multiplied by `scale` and captioned `unit` (costs in
// seconds drawn in milliseconds: {1000, "ms"}).
struct TimeAxis {
  double scale = 1.0;
  std::string unit = "time units";
};

// One row per rank; one box per compute instruction (and per blocking transfer that takes time),
// labelled with its microbatch number and shaded by model chunk.
Timeline schedule_timeline(const pipeline::Schedule& schedule, const SimulationResult& result,
                           const TimeAxis& axis = {});

// The box an instruction of `op` is drawn as.
BoxKind box_kind(pipeline::Op op);

}  // namespace tessera::plan
