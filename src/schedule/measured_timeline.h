#pragma once
// A pipeline step as it ran: for every pipeline rank, one record per instruction of its list, in
// list order, with when it started and ended in seconds from the step's start on a clock common to
// the ranks. The executor's recorder makes it (parallel/pipeline_timeline.h); the trainer writes it
// as timeline.json (log.timeline); `tessera simulate --timeline` reads it back, draws it and
// simulates the same schedule with the costs it measured (plan/pipeline/measured_run.h).
//
// timeline.json:
//   {"format": "tessera pipeline timeline", "version": 1,
//    "schedule": "1f1b", "p": 2, "m": 4, "v": 1,
//    "clock_uncertainty": [0, 2.1e-05],          seconds, per rank (how well its clock was aligned)
//    "ranks": [[{"op": "forward", "stage": 0, "microbatch": 0, "chunk": 0, "start": 0.0, "end": 0.0093},
//               {"op": "send", "stage": 0, "microbatch": 0, "chunk": 0, "tensor": "activation", "peer": 1,
//                "start": 0.0093, "end": 0.0094}, ...],
//              [...]]}
// Ops are pipeline::op_name's; transfers also carry the tensor and the peer rank; an optimizer
// step's microbatch is -1. A run of optimizer-step instructions (one per chunk) executes as one
// optimizer step: the first record spans it, the others are instants at its end.
#include <string>
#include <string_view>
#include <vector>

#include "schedule/instruction.h"

namespace tessera::pipeline {

struct MeasuredInstruction {
  Op op = Op::Forward;
  int stage = 0;
  int chunk = 0;
  int microbatch = -1;
  Tensor tensor = Tensor::None;  // transfers
  int peer = -1;                 // transfers
  double start = 0;              // seconds from the step's start
  double end = 0;

  bool operator==(const MeasuredInstruction&) const = default;
};

struct MeasuredTimeline {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int ranks = 1;         // p
  int microbatches = 1;  // m
  int chunks = 1;        // v
  std::vector<double> clock_uncertainty;             // [rank] seconds; rank 0's clock is the reference
  std::vector<std::vector<MeasuredInstruction>> records;  // [rank]: one per instruction, list order

  bool operator==(const MeasuredTimeline&) const = default;
};

// The instruction a record stands for, with a flushing schedule's weight versions (compute reads 0,
// the optimizer step makes 1).
Instruction instruction_of(const MeasuredInstruction& record);

// The schedule the timeline ran: regenerated from (kind, p, m, v), which fixes every rank's list.
Schedule schedule_of(const MeasuredTimeline& timeline);
// Throws, naming the rank and record, unless every rank has exactly one record per instruction of
// its list in `schedule`, in order, each with 0 <= start <= end.
void check_follows(const MeasuredTimeline& timeline, const Schedule& schedule);

// timeline.json's text, fields in the order shown above. Times are written with enough digits to
// read back the same doubles.
std::string timeline_json(const MeasuredTimeline& timeline);
// Throws tessera::Error naming `what` (the file) and the field when the text is not a timeline of a
// schedule tessera can generate, or its records do not follow that schedule.
MeasuredTimeline parse_measured_timeline(std::string_view text, const std::string& what);

void write_measured_timeline(const MeasuredTimeline& timeline, const std::string& path);  // atomically
MeasuredTimeline read_measured_timeline(const std::string& path);

}  // namespace tessera::pipeline
