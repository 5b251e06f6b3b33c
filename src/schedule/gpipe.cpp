// GPipe (Huang et al. 2019): every microbatch's forward, then every backward, then one optimizer
// step. Backward runs last-in first-out, as autograd would over the concatenated microbatches.
#include "schedule/compute_order.h"
#include "schedule/generators.h"

namespace tessera::pipeline {

Schedule make_gpipe(const config::ParallelLayout& layout, const GeneratorOptions& options) {
  Schedule s = start_schedule(ScheduleKind::GPipe, layout, options);
  for (int r = 0; r < s.ranks; ++r) {
    auto& order = s.programs[r];
    for (int i = 0; i < s.microbatches; ++i) push_compute(order, s, Op::Forward, r, i);
    for (int i = s.microbatches - 1; i >= 0; --i) push_compute(order, s, Op::Backward, r, i);
    push_optimizer_steps(order, s, r, 1);
  }
  place_transfers(s);
  return s;
}

}  // namespace tessera::pipeline
