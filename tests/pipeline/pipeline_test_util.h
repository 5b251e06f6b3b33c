#pragma once
// The (kind, p, m, v) the pipeline tests sweep, as the parallel layout the generators take: one
// data-parallel replica running m microbatches of one sequence on p stages with v chunks each.
#include "config/parallel_layout.h"

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

}  // namespace tessera::pipeline::test_util
