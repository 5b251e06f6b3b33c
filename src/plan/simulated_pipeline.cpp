#include "plan/simulated_pipeline.h"

#include "core/check.h"
#include "schedule/generators.h"

namespace tessera::plan {

namespace {

pipeline::Schedule generate(const config::ParallelLayout& l) {
  // The simulator could play any kind, but the memory model around it describes only these.
  check_modeled_schedule(l.schedule);
  return pipeline::make_schedule(l);
}

}  // namespace

PipelineModel simulated_pipeline(TransferMode mode) {
  PipelineModel model;
  model.name = "simulated";
  model.makespan = [mode](const config::ParallelLayout& l, const StageTimes& t) {
    const pipeline::Schedule schedule = generate(l);
    // The cost model's recompute is already inside t.backward; weight gradients are not split.
    PipelineCosts costs = uniform_costs(schedule, t.forward, t.backward, 0.0, t.p2p);
    costs.mode = mode;
    return simulate_schedule(schedule, costs).total_time;
  };
  model.inflight_chunks = [mode](const config::ParallelLayout& l, int stage) -> int64_t {
    TS_CHECK(stage >= 0 && stage < l.pp, "plan: stage {} is outside [0, {})", stage, l.pp);
    const pipeline::Schedule schedule = generate(l);
    PipelineCosts costs = uniform_costs(schedule, 1.0, 2.0, 0.0, 0.0);
    costs.mode = mode;
    return simulate_schedule(schedule, costs).peak_alive[static_cast<size_t>(stage)];
  };
  return model;
}

}  // namespace tessera::plan
