#include "plan/pipeline_model.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::plan {

PipelineShape pipeline_shape(const Layout& l) {
  return PipelineShape{l.pp, l.microbatches(), l.v, l.schedule};
}

double closed_form_bubble_fraction(const PipelineShape& s) {
  TS_CHECK(s.stages >= 1 && s.microbatches >= 1 && s.chunks >= 1, "plan: pipeline shape needs p, m, v >= 1");
  const double p = s.stages, m = static_cast<double>(s.microbatches), v = s.chunks;
  if (s.schedule == PipelineSchedule::GPipe) return (p - 1) / m;
  return (p - 1) / (v * m);
}

double closed_form_makespan(const PipelineShape& s, const StageTimes& t) {
  const double m = static_cast<double>(s.microbatches), v = s.chunks, p = s.stages;
  if (s.stages == 1) return m * (t.forward + t.backward);
  // Each chunk of each microbatch receives its input and sends its output once forward and once
  // backward; Megatron's 1F1B waits for these transfers, so they sit on the critical path.
  const double per_microbatch = t.forward + t.backward + 2 * v * t.p2p;
  if (s.schedule == PipelineSchedule::GPipe) return (m + p - 1) * per_microbatch;
  return (m + (p - 1) / v) * per_microbatch;
}

int64_t closed_form_inflight_chunks(const PipelineShape& s, int stage) {
  TS_CHECK(stage >= 0 && stage < s.stages, "plan: stage {} is outside [0, {})", stage, s.stages);
  const int64_t p = s.stages, m = s.microbatches, v = s.chunks, r = stage;
  if (s.schedule == PipelineSchedule::GPipe) return m;
  if (v == 1) return std::min(p - r, m);
  return std::min(2 * (p - r - 1) + (v - 1) * p + 1, v * m);
}

PipelineModel closed_form_pipeline() {
  return PipelineModel{"closed form", closed_form_makespan, closed_form_inflight_chunks};
}

}  // namespace tessera::plan
