// PipeDream-2BW (Narayanan et al. 2021, "Memory-efficient pipeline-parallel DNN training").
//
// 1F1B that never drains: `steps` batches of m microbatches flow back to back, and each rank applies
// its optimizer step right after the last backward of a batch. Weights are double-buffered with a
// delay of one step: batch b computes its gradients on version max(0, b - 1), and the step after
// batch b produces version b + 1 = version b - lr * grad(version b - 1). A microbatch's forward and
// backward read the same (stashed) version, so the version is written on every instruction.
// Versions count optimizer steps from the start of training (options.first_step), so a list that
// continues a run where an earlier one drained has its first batch read the version before the
// newest, exactly as one list over the whole run would.
#include <algorithm>

#include "parallel/pipeline/compute_order.h"
#include "parallel/pipeline/generators.h"

namespace tessera::pipeline {

Schedule make_pipedream_2bw(const config::ParallelLayout& layout, const GeneratorOptions& options) {
  Schedule s = start_schedule(ScheduleKind::PipeDream2BW, layout, options);
  const int p = s.ranks, m = s.microbatches, n = s.total_microbatches(), first = s.first_step;
  const auto version = [&](int mb) { return std::max(0, first + mb / m - 1); };
  for (int r = 0; r < p; ++r) {
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
