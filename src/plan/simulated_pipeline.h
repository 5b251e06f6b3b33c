#pragma once
// The pipeline model backed by the schedule simulator: the makespan and the in-flight counts come
// from playing the generated schedule (schedule/) with the stage times of the cost model,
// instead of from the closed forms. One simulation per question, so it serves single layouts
// (tessera plan --layout/--published --simulate) rather than the planner's search.
#include "plan/pipeline/simulator.h"
#include "plan/pipeline_model.h"

namespace tessera::plan {

// Asynchronous transfers (posted sends and receives, compute waits only for the tensor it
// consumes) are how Megatron's executors run; the generated orders assume them.
PipelineModel simulated_pipeline(TransferMode mode = TransferMode::Async);

}  // namespace tessera::plan
