#include "plan/pipeline_model.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::plan {

using config::ScheduleKind;

void check_modeled_schedule(ScheduleKind kind) {
  TS_CHECK(kind != ScheduleKind::PipeDream2BW,
           "plan: the cost model describes the 1f1b, interleaved, gpipe and zb-h1 schedules, not schedule={}: {} needs "
           "a second weight version in memory, which the memory model does not count; use one of those, or time this "
           "schedule alone with `tessera simulate --schedule {}`",
           config::schedule_name(kind), config::schedule_title(kind), config::schedule_name(kind));
}

namespace {

// ZB-H1 (Qi et al. 2023) idles each rank (p - 1)(t_F + t_B - t_W), t_B and t_W the input- and
// weight-gradient halves of backward, where 1F1B idles (p - 1)(t_F + t_B + t_W); derived for
// m >= p and t_W <= t_F. The cost model times backward whole: its matmuls, most of it, cost as
// much for the input gradient as for the weight gradient, so the halves are taken equal, and the
// idle time is (p - 1) t_F.
bool zero_bubble_holds(const config::ParallelLayout& l) {
  return l.schedule == ScheduleKind::ZeroBubbleH1 && l.microbatches() >= l.pp;
}

}  // namespace

double closed_form_bubble_fraction(const config::ParallelLayout& l) {
  check_modeled_schedule(l.schedule);
  TS_CHECK(l.pp >= 1 && l.microbatches() >= 1 && l.virtual_stages >= 1, "plan: pipeline shape needs p, m, v >= 1");
  const double p = l.pp, m = static_cast<double>(l.microbatches()), v = l.virtual_stages;
  if (l.schedule == ScheduleKind::GPipe) return (p - 1) / m;
  // With t_B = 2 t_F, the idle (p - 1) t_F of 3 m t_F of work.
  if (zero_bubble_holds(l)) return (p - 1) / (3 * m);
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
  if (zero_bubble_holds(l)) return m * per_microbatch + (p - 1) * (t.forward + 2 * t.p2p);
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
