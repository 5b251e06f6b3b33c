// PipeDream-2BW (Narayanan et al. 2021, "Memory-efficient pipeline-parallel DNN training").
//
// 1F1B that never drains: `steps` batches of m microbatches flow back to back, and each rank applies
// its optimizer step right after the last backward of a batch. Weights are double-buffered: the
// step after batch b produces version b + 1, and a microbatch's forward and backward on a stage
// read the same version, so the version is written on every instruction.
//
// Rank r's forward of microbatch j of batch b comes before its step for batch b - 1 exactly when
// j <= p - 2 - r (the warm-up forwards 1F1B runs ahead of its backwards); those must read version
// b - 1, and so must their backwards, which come after the step. Under TwoBWVersions::Newest every
// other microbatch reads version b, the newest the rank holds; under ::Delayed all of batch b reads
// b - 1 (the paper's uniform delay: version b + 1 = version b - lr * grad(version b - 1)).
//
// Why the newest is the default: a one-step-stale gradient shrinks momentum's stable step. On a
// quadratic of curvature h, x(t+1) = x(t) - lr * m(t) with m an exponential average (beta 0.9) of
// h * x is stable up to lr * h = 2(1 + beta)/(1 - beta) = 38 with fresh gradients and only up to
// 1 with gradients one step late; with a share a of them late, about 1/a. Adam trains at the edge
// of that bound (its preconditioned sharpness settles there), so the uniform delay stalls a run
// tuned for synchronous training; late only where the pipeline forces it, little is lost
// (docs/benchmarks.md, "PipeDream-2BW against 1F1B").
// Versions count optimizer steps from the start of training (options.first_step), so a list that
// continues a run where an earlier one drained has its first batch read the version before the
// newest, exactly as one list over the whole run would.
#include <algorithm>

#include "schedule/compute_order.h"
#include "schedule/generators.h"

namespace tessera::pipeline {

Schedule make_pipedream_2bw(const config::ParallelLayout& layout, const GeneratorOptions& options) {
  Schedule s = start_schedule(ScheduleKind::PipeDream2BW, layout, options);
  const int p = s.ranks, m = s.microbatches, n = s.total_microbatches(), first = s.first_step;
  const bool delayed = options.two_bw_versions == TwoBWVersions::Delayed;
  for (int r = 0; r < p; ++r) {
    const auto version = [&](int mb) {
      const int batch = first + mb / m;
      const bool before_previous_step = mb % m <= p - 2 - r;
      return delayed || before_previous_step ? std::max(0, batch - 1) : batch;
    };
    auto& order = s.programs[r];
    for (int x = 0; x < n + p - 1; ++x) {
      if (x < n) push_compute(order, s, Op::Forward, r, x, version(x));
      const int b = x - (p - 1 - r);
      if (b < 0 || b >= n) continue;
      push_compute(order, s, Op::Backward, r, b, version(b));
      // m >= p guarantees this comes before the first forward that reads the new version.
      if ((b + 1) % m == 0) push_optimizer_steps(order, s, r, first + (b + 1) / m);
    }
  }
  place_transfers(s);
  return s;
}

}  // namespace tessera::pipeline
