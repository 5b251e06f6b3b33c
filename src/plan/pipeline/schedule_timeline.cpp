#include "plan/pipeline/schedule_timeline.h"

#include <fmt/format.h>

#include "core/check.h"

namespace tessera::plan {

using pipeline::Op;

BoxKind box_kind(Op op) {
  switch (op) {
    case Op::Forward: return BoxKind::Forward;
    case Op::Backward: return BoxKind::Backward;
    case Op::BackwardInput: return BoxKind::BackwardInput;
    case Op::BackwardWeight: return BoxKind::BackwardWeight;
    case Op::Recompute: return BoxKind::Recompute;
    case Op::Send:
    case Op::Recv: return BoxKind::Transfer;
    case Op::OptimizerStep: return BoxKind::Optimizer;
  }
  return BoxKind::Other;
}

Timeline schedule_timeline(const pipeline::Schedule& schedule, const SimulationResult& result, const TimeAxis& axis) {
  TS_CHECK(result.timeline.size() == schedule.programs.size(),
           "simulation result has {} ranks but the schedule has {}", result.timeline.size(), schedule.programs.size());
  Timeline t;
  t.title = fmt::format("{}: p = {}, m = {}", pipeline::schedule_title(schedule.kind), schedule.ranks,
                        schedule.microbatches);
  if (schedule.chunks > 1) t.title += fmt::format(", v = {}", schedule.chunks);
  if (schedule.steps > 1) t.title += fmt::format(", {} steps", schedule.steps);
  t.time_unit = axis.unit;
  const bool double_buffered = schedule.kind == pipeline::ScheduleKind::PipeDream2BW;
  if (double_buffered)
    t.shade_meaning = "weight buffer";
  else if (schedule.chunks > 1)
    t.shade_meaning = "model chunk";
  for (int r = 0; r < schedule.ranks; ++r) {
    TimelineRow row;
    row.name = fmt::format("rank {}", r);
    for (const TimedInstruction& timed : result.timeline[r]) {
      const pipeline::Instruction& ins = schedule.programs[r][timed.index];
      // Instant transfers happen off the rank's compute stream; instant optimizer steps still
      // show where each step's update lands.
      if (timed.end <= timed.start && ins.op != Op::OptimizerStep) continue;
      TimedBox box;
      box.start = timed.start * axis.scale;
      box.end = timed.end * axis.scale;
      box.kind = box_kind(ins.op);
      // Shade what differs between boxes of the same microbatch: the model chunk, or for 2BW the
      // weight buffer the instruction reads.
      box.shade = double_buffered ? ins.weight_version % 2 : ins.chunk;
      if (ins.op != Op::OptimizerStep && !pipeline::is_transfer(ins.op)) box.label = fmt::format("{}", ins.microbatch);
      box.detail = fmt::format("{} [{:g}, {:g}]", pipeline::describe(ins), box.start, box.end);
      row.boxes.push_back(std::move(box));
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace tessera::plan
