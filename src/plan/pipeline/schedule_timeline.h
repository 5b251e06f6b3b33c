#pragma once
// Turns a simulated schedule into the generic timeline the drawing code takes.
#include "parallel/pipeline/instruction.h"
#include "plan/pipeline/simulator.h"
#include "plan/pipeline/timeline.h"

namespace tessera::plan {

// One row per rank; one box per compute instruction (and per blocking transfer that takes time),
// labelled with its microbatch number and shaded by model chunk.
Timeline schedule_timeline(const pipeline::Schedule& schedule, const SimulationResult& result);

}  // namespace tessera::plan
