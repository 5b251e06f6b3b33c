#pragma once
// The measured timeline of one pipeline step (schedule/measured_timeline.h), made from the
// spans the interpreter recorded on every pipeline rank (exec/timeline_recorder.h).
//
// Instructions. A rank's program holds, for each instruction of its list, the actions lowered from
// it (Action::instruction): an instruction's record spans from the start of its first action to
// the end of its last (a Forward: the embedding and every block of the stage; a Backward: its
// recomputations too). An instruction without actions of its own — the second optimizer step of a
// run of them, which executes as one — is an instant at the end of the record before it.
//
// One clock. Each rank recorded from its own program start on its own clock; hosts need not agree.
// Pipeline rank 0 measures every other rank's offset by a few round trips: the other rank's reading
// is taken to lie at the midpoint of the round trip, and the shortest of several trips is kept, so
// the error is at most half of it (reported per rank as clock_uncertainty). Then every time is
// shifted so the step starts at 0 when the first rank began its program: waiting for a neighbour
// that started later counts as idle, as it does in the simulator, where every rank starts at 0.
#include <vector>

#include "dist/communicator.h"
#include "exec/program.h"
#include "exec/timeline_recorder.h"
#include "schedule/instruction.h"
#include "schedule/measured_timeline.h"

namespace tessera::parallel {

// This rank's records, one per instruction of `instructions` (its list), in seconds since its own
// program began. `recorder` must hold the spans of a run of `program`, lowered from that list.
std::vector<pipeline::MeasuredInstruction> instruction_records(const std::vector<pipeline::Instruction>& instructions,
                                                               const exec::Program& program,
                                                               const exec::TimelineRecorder& recorder);

// Collective over `pipeline` (null: a group of one): every rank gets the whole timeline of the
// step `recorder` holds, which ran `program`, this rank's lowering of `schedule`.
pipeline::MeasuredTimeline gather_timeline(const pipeline::Schedule& schedule, const exec::Program& program,
                                           const exec::TimelineRecorder& recorder, dist::Communicator* pipeline);

}  // namespace tessera::parallel
