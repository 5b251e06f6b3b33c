#include "plan/pipeline_model.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::plan {

using config::ScheduleKind;

void check_modeled_schedule(ScheduleKind kind) {
  TS_CHECK(kind == ScheduleKind::OneFOneB || kind == ScheduleKind::Interleaved || kind == ScheduleKind::GPipe,
           "plan: the cost model describes the 1f1b, interleaved and gpipe schedules, not schedule={}: {} needs {}; use "
           "one of those three, or time this schedule alone with `tessera simulate --schedule {}`",
           config::schedule_name(kind), config::schedule_title(kind),
           kind == ScheduleKind::ZeroBubbleH1
               ? "the weight-gradient half of every backward timed on its own, which the cost model does not split out"
               : "a second weight version in memory, which the memory model does not count",
           config::schedule_name(kind));
}

double closed_form_bubble_fraction(const config::ParallelLayout& l) {
  check_modeled_schedule(l.schedule);
  TS_CHECK(l.pp >= 1 && l.microbatches() >= 1 && l.virtual_stages >= 1, "plan: pipeline shape needs p, m, v >= 1");
  const double p = l.pp, m = static_cast<double>(l.microbatches()), v = l.virtual_stages;
  if (l.schedule == ScheduleKind::GPipe) return (p - 1) / m;
  return (p - 1) / (v * m);
}

double closed_form_makespan(const config::ParallelLayout& l, const StageTimes& t) {
  check_modeled_schedule(l.schedule);
  const double m = static_cast<double>(l.microbatches()), v = l.virtual_stages, p = l.pp;
  if (l.pp == 1) return m * (t.forward + t.backward);
  // Each chunk of each microbatch receives its input and sends its output once forward and once
  // backward; Megatron's 1F1B waits for these transfers, so they sit on the critical path.
  const double per_microbatch = t.forward + t.backward + 2 * v * t.p2p;
  if (l.schedule == ScheduleKind::GPipe) return (m + p - 1) * per_microbatch;
  return (m + (p - 1) / v) * per_microbatch;
}

int64_t closed_form_inflight_chunks(const config::ParallelLayout& l, int stage) {
  check_modeled_schedule(l.schedule);
  TS_CHECK(stage >= 0 && stage < l.pp, "plan: stage {} is outside [0, {})", stage, l.pp);
  const int64_t p = l.pp, m = l.microbatches(), v = l.virtual_stages, r = stage;
  if (l.schedule == ScheduleKind::GPipe) return m;
  if (v == 1) return std::min(p - r, m);
  return std::min(2 * (p - r - 1) + (v - 1) * p + 1, v * m);
}

PipelineModel closed_form_pipeline() {
  return PipelineModel{"closed form", closed_form_makespan, closed_form_inflight_chunks};
}

}  // namespace tessera::plan
