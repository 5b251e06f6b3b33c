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
    // The cost model's recompute is already inside t.backward. Its weight half, which ZB-H1 moves
    // into the bubble, is taken as half of it, as the closed form takes it.
    const double weight = l.schedule == config::ScheduleKind::ZeroBubbleH1 ? t.backward / 2 : 0.0;
    PipelineCosts costs = uniform_costs(schedule, t.forward, t.backward, weight, t.p2p);
    costs.mode = mode;
    return simulate_schedule(schedule, costs).total_time;
  };
  model.inflight_chunks = [mode](const config::ParallelLayout& l, int stage) -> int64_t {
    TS_CHECK(stage >= 0 && stage < l.pp, "plan: stage {} is outside [0, {})", stage, l.pp);
    const pipeline::Schedule schedule = generate(l);
    PipelineCosts costs =
        uniform_costs(schedule, 1.0, 2.0, l.schedule == config::ScheduleKind::ZeroBubbleH1 ? 1.0 : 0.0, 0.0);
    costs.mode = mode;
    return simulate_schedule(schedule, costs).peak_alive[static_cast<size_t>(stage)];
  };
  return model;
}

}  // namespace tessera::plan
