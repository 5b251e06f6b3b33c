// Zero bubble ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism").
//
// Backward is split: B computes the input gradient, which the previous stage is waiting for, and W
// the weight gradient, which nobody waits for. Rank r runs, for x = 0, 1, ...: F(x), then
// B(x - (p - 1 - r)), then W(x - (p - 1)), skipping indices outside [0, m). B keeps 1F1B's
// position, so gradients travel upstream sooner (only B is on the critical path); the late Ws fill
// what would be 1F1B's cool-down bubble. A microbatch is alive from F to W: at most p per rank, the
// same peak as 1F1B's first rank. With t_F = t_B = t_W the bubble is a third of 1F1B's.
#include "schedule/compute_order.h"
#include "schedule/generators.h"

namespace tessera::pipeline {

Schedule make_zero_bubble_h1(const config::ParallelLayout& layout, const GeneratorOptions& options) {
  Schedule s = start_schedule(ScheduleKind::ZeroBubbleH1, layout, options);
  const int p = s.ranks, m = s.microbatches;
  for (int r = 0; r < p; ++r) {
    auto& order = s.programs[r];
    for (int x = 0; x < m + p - 1; ++x) {
      if (x < m) push_compute(order, s, Op::Forward, r, x);
      const int b = x - (p - 1 - r);
      if (b >= 0 && b < m) push_compute(order, s, Op::BackwardInput, r, b);
      const int w = x - (p - 1);
      if (w >= 0 && w < m) push_compute(order, s, Op::BackwardWeight, r, w);
    }
    push_optimizer_steps(order, s, r, 1);
  }
  place_transfers(s);
  return s;
}

}  // namespace tessera::pipeline
