#pragma once
// The (kind, p, m, v) the pipeline tests sweep, as the parallel layout the generators take: one
// data-parallel replica running m microbatches of one sequence on p stages with v chunks each.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "config/parallel_layout.h"
#include "core/check.h"
#include "schedule/generators.h"

namespace tessera::pipeline::test_util {

inline config::ParallelLayout pipeline_layout(config::ScheduleKind kind, int p, int m, int v = 1) {
  config::ParallelLayout layout;
  layout.schedule = kind;
  layout.pp = p;
  layout.virtual_stages = v;
  layout.micro_batch = 1;
  layout.global_batch = m;
  return layout;
}

// Calls visit(schedule, where) for every schedule of every kind that the generators accept with p
// from p_min to p_max, m from microbatches(p), v from 1 to v_max, with and without recompute
// (PipeDream-2BW over two steps); `where` names the shape for failure messages.
template <class Microbatches, class Visit>
void for_each_schedule(int p_min, int p_max, int v_max, Microbatches microbatches, Visit visit) {
  using config::ScheduleKind;
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                            ScheduleKind::PipeDream2BW, ScheduleKind::ZeroBubbleH1})
    for (int p = p_min; p <= p_max; ++p)
      for (int m : microbatches(p))
        for (int v = 1; v <= v_max; ++v)
          for (bool recompute : {false, true}) {
            Schedule s;
            try {
              s = make_schedule(pipeline_layout(kind, p, m, v),
                                {.steps = kind == ScheduleKind::PipeDream2BW ? 2 : 1, .recompute = recompute});
            } catch (const Error&) {
              continue;
            }
            visit(s, fmt::format("{} p={} m={} v={}{}", schedule_name(kind), p, m, v, recompute ? " recompute" : ""));
          }
}

}  // namespace tessera::pipeline::test_util
