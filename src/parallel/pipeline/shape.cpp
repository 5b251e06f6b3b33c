// Shape checks shared by all generators, and the dispatch from kind to generator.
#include "core/check.h"
#include "parallel/pipeline/generators.h"

namespace tessera::pipeline {

namespace {
// Large enough for any real pipeline, small enough that a typo cannot allocate gigabytes of lists.
constexpr long long kMaxComputePerList = 50'000'000;
}  // namespace

void check_shape(ScheduleKind kind, const ScheduleShape& shape) {
  const std::string_view name = schedule_name(kind);
  TS_CHECK(shape.ranks >= 1, "{}: a pipeline needs at least one stage (got p = {}); use --stages 1 or more", name,
           shape.ranks);
  TS_CHECK(shape.microbatches >= 1, "{}: needs at least one microbatch (got m = {}); use --microbatches 1 or more",
           name, shape.microbatches);
  TS_CHECK(shape.chunks >= 1, "{}: needs at least one model chunk per rank (got v = {})", name, shape.chunks);
  TS_CHECK(shape.steps >= 1, "{}: needs at least one optimizer step (got {})", name, shape.steps);
  if (kind != ScheduleKind::Interleaved)
    TS_CHECK(shape.chunks == 1,
             "{} places one model chunk per rank (got v = {}); use the interleaved schedule for v > 1", name,
             shape.chunks);
  if (kind != ScheduleKind::PipeDream2BW)
    TS_CHECK(shape.steps == 1,
             "{} flushes the pipeline at every optimizer step, so one list covers one step (got steps = {}); "
             "only 2bw runs several steps without a flush",
             name, shape.steps);
  if (kind == ScheduleKind::Interleaved && shape.chunks > 1) {
    const int p = shape.ranks, m = shape.microbatches;
    const int below = m / p * p, above = below + p;
    TS_CHECK(m % p == 0,
             "interleaved 1F1B with v = {} chunks needs the number of microbatches to be a multiple of the number "
             "of stages (m = {} is not a multiple of p = {}); use m = {}{}",
             shape.chunks, m, p, below > 0 ? fmt::format("{} or m = ", below) : std::string(), above);
  }
  if (kind == ScheduleKind::PipeDream2BW)
    TS_CHECK(shape.microbatches >= shape.ranks,
             "PipeDream-2BW needs at least as many microbatches per batch as stages (m = {} < p = {}): with fewer, "
             "the first stage starts batch b + 2 before batch b has left it, so three weight versions would be "
             "alive instead of two; use m >= {}",
             shape.microbatches, shape.ranks, shape.ranks);
  const long long compute = 4LL * shape.ranks * shape.chunks * shape.microbatches * shape.steps;
  TS_CHECK(compute <= kMaxComputePerList,
           "{}: p = {}, v = {}, m = {}, steps = {} would make {} instructions; that is beyond any real pipeline", name,
           shape.ranks, shape.chunks, shape.microbatches, shape.steps, compute);
}

Schedule make_schedule(ScheduleKind kind, const ScheduleShape& shape) {
  switch (kind) {
    case ScheduleKind::GPipe: return make_gpipe(shape);
    case ScheduleKind::OneFOneB: return make_one_f_one_b(shape);
    case ScheduleKind::Interleaved: return make_interleaved(shape);
    case ScheduleKind::PipeDream2BW: return make_pipedream_2bw(shape);
    case ScheduleKind::ZeroBubbleH1: return make_zero_bubble_h1(shape);
  }
  TS_FAIL("unknown schedule kind {}", static_cast<int>(kind));
}

}  // namespace tessera::pipeline
