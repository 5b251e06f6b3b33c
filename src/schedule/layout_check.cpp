// Layout checks shared by all generators, and the dispatch from kind to generator. The messages
// name both spellings of each number: the `tessera simulate` flag and the layout field.
#include "core/check.h"
#include "schedule/generators.h"

namespace tessera::pipeline {

namespace {
// Large enough for any real pipeline, small enough that a typo cannot allocate gigabytes of lists.
constexpr long long kMaxComputePerList = 50'000'000;
}  // namespace

void check_layout_for(ScheduleKind kind, const config::ParallelLayout& layout, const GeneratorOptions& options) {
  const std::string_view name = schedule_name(kind);
  const int p = layout.pp, v = layout.virtual_stages;
  TS_CHECK(p >= 1, "{}: a pipeline needs at least one stage (got p = {}); use --stages 1 or more (pp in a layout)", name,
           p);
  TS_CHECK(layout.dp >= 1 && layout.micro_batch >= 1,
           "{}: the microbatch count m = global batch / (dp × micro batch) needs dp >= 1 and a micro batch of at least "
           "one sequence (got dp = {}, micro batch = {})",
           name, layout.dp, layout.micro_batch);
  const int64_t per_step = int64_t{layout.dp} * layout.micro_batch;
  TS_CHECK(layout.global_batch % per_step == 0,
           "{}: the global batch {} is not a multiple of dp {} × micro batch {} = {}, so the microbatch count m = global "
           "batch / (dp × micro batch) is not whole; use a global batch that is",
           name, layout.global_batch, layout.dp, layout.micro_batch, per_step);
  const int64_t m = layout.microbatches();
  TS_CHECK(m >= 1,
           "{}: needs at least one microbatch (got m = {}); use --microbatches 1 or more (in a layout, a global batch of "
           "at least dp × micro batch = {})",
           name, m, per_step);
  TS_CHECK(v >= 1, "{}: needs at least one model chunk per rank (got v = {}); use --chunks 1 or more (virtual_stages "
           "in a layout)", name, v);
  TS_CHECK(options.steps >= 1, "{}: needs at least one optimizer step (got {})", name, options.steps);
  if (kind != ScheduleKind::Interleaved)
    TS_CHECK(v == 1, "{} places one model chunk per rank (got v = {}); use the interleaved schedule for v > 1", name, v);
  if (kind != ScheduleKind::PipeDream2BW)
    TS_CHECK(options.steps == 1,
             "{} flushes the pipeline at every optimizer step, so one list covers one step (got steps = {}); "
             "only 2bw runs several steps without a flush",
             name, options.steps);
  TS_CHECK(options.first_step >= 0, "{}: the optimizer steps before the list cannot be negative (got {})", name,
           options.first_step);
  if (kind != ScheduleKind::PipeDream2BW)
    TS_CHECK(options.first_step == 0,
             "{} flushes the pipeline, so its lists do not depend on the steps before them (got first_step = {}); "
             "only 2bw numbers weight versions across lists",
             name, options.first_step);
  if (kind == ScheduleKind::Interleaved && v > 1) {
    const int64_t below = m / p * p, above = below + p;
    TS_CHECK(m % p == 0,
             "interleaved 1F1B with v = {} chunks needs the number of microbatches to be a multiple of the number "
             "of stages (m = {} is not a multiple of p = {}); use m = {}{} (--microbatches, or a global batch of m × "
             "dp × micro batch in a layout)",
             v, m, p, below > 0 ? fmt::format("{} or m = ", below) : std::string(), above);
  }
  if (kind == ScheduleKind::PipeDream2BW)
    TS_CHECK(m >= p,
             "PipeDream-2BW needs at least as many microbatches per batch as stages (m = {} < p = {}): with fewer, "
             "the first stage starts batch b + 2 before batch b has left it, so three weight versions would be "
             "alive instead of two; use m >= {} (--microbatches, or a global batch of m × dp × micro batch in a "
             "layout)",
             m, p, p);
  // In floating point: m comes from a 64-bit batch and the product must not wrap before the check.
  const double compute = 4.0 * p * v * static_cast<double>(m) * options.steps;
  TS_CHECK(compute <= kMaxComputePerList,
           "{}: p = {}, v = {}, m = {}, steps = {} would make {:.0f} instructions; that is beyond any real pipeline", name,
           p, v, m, options.steps, compute);
}

TwoBWVersions parse_two_bw_versions(std::string_view name) {
  if (name == "newest") return TwoBWVersions::Newest;
  if (name == "delayed") return TwoBWVersions::Delayed;
  TS_FAIL("2bw weight version '{}' is not known; use \"newest\" (a microbatch reads the newest weights its stage "
          "holds) or \"delayed\" (all of batch b reads version b - 1)", name);
}

Schedule make_schedule(const config::ParallelLayout& layout, const GeneratorOptions& options) {
  switch (layout.schedule) {
    case ScheduleKind::GPipe: return make_gpipe(layout, options);
    case ScheduleKind::OneFOneB: return make_one_f_one_b(layout, options);
    case ScheduleKind::Interleaved: return make_interleaved(layout, options);
    case ScheduleKind::PipeDream2BW: return make_pipedream_2bw(layout, options);
    case ScheduleKind::ZeroBubbleH1: return make_zero_bubble_h1(layout, options);
  }
  TS_FAIL("unknown schedule kind {}", static_cast<int>(layout.schedule));
}

}  // namespace tessera::pipeline
