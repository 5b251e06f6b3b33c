#include "plan/simulated_pipeline.h"

#include <limits>

#include "core/check.h"
#include "parallel/pipeline/generators.h"

namespace tessera::plan {

namespace {

pipeline::Schedule generate(const PipelineShape& s) {
  TS_CHECK(s.microbatches <= std::numeric_limits<int>::max(), "plan: {} microbatches are too many to simulate", s.microbatches);
  pipeline::ScheduleShape shape;
  shape.ranks = s.stages;
  shape.microbatches = static_cast<int>(s.microbatches);
  shape.chunks = s.chunks;
  pipeline::ScheduleKind kind = s.schedule == PipelineSchedule::GPipe ? pipeline::ScheduleKind::GPipe
                                : s.chunks > 1                         ? pipeline::ScheduleKind::Interleaved
                                                                       : pipeline::ScheduleKind::OneFOneB;
  return pipeline::make_schedule(kind, shape);
}

}  // namespace

PipelineModel simulated_pipeline(TransferMode mode) {
  PipelineModel model;
  model.name = "simulated";
  model.makespan = [mode](const PipelineShape& s, const StageTimes& t) {
    const pipeline::Schedule schedule = generate(s);
    // The cost model's recompute is already inside t.backward; weight gradients are not split.
    PipelineCosts costs = uniform_costs(schedule, t.forward, t.backward, 0.0, t.p2p);
    costs.mode = mode;
    return simulate_schedule(schedule, costs).total_time;
  };
  model.inflight_chunks = [mode](const PipelineShape& s, int stage) -> int64_t {
    TS_CHECK(stage >= 0 && stage < s.stages, "plan: stage {} is outside [0, {})", stage, s.stages);
    const pipeline::Schedule schedule = generate(s);
    PipelineCosts costs = uniform_costs(schedule, 1.0, 2.0, 0.0, 0.0);
    costs.mode = mode;
    return simulate_schedule(schedule, costs).peak_alive[static_cast<size_t>(stage)];
  };
  return model;
}

}  // namespace tessera::plan
