// 1F1B (PipeDream-Flush, Narayanan et al. 2021; Megatron's default schedule).
//
// Written as one rule per rank instead of warm-up / steady / cool-down loops: at step x rank r
// runs F(x) and then B(x - (p - 1 - r)), skipping indices outside [0, m). The first p - 1 - r steps
// are the warm-up forwards, the last ones the cool-down backwards, and rank r never holds more
// than p - r microbatches.
#include "schedule/compute_order.h"
#include "schedule/generators.h"

namespace tessera::pipeline {

Schedule make_one_f_one_b(const config::ParallelLayout& layout, const GeneratorOptions& options) {
  Schedule s = start_schedule(ScheduleKind::OneFOneB, layout, options);
  const int p = s.ranks, m = s.microbatches;
  for (int r = 0; r < p; ++r) {
    auto& order = s.programs[r];
    for (int x = 0; x < m + p - 1; ++x) {
      if (x < m) push_compute(order, s, Op::Forward, r, x);
      const int b = x - (p - 1 - r);
      if (b >= 0 && b < m) push_compute(order, s, Op::Backward, r, b);
    }
    push_optimizer_steps(order, s, r, 1);
  }
  place_transfers(s);
  return s;
}

}  // namespace tessera::pipeline
