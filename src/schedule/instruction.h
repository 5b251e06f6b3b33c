#pragma once
// A pipeline schedule as data: one ordered list of instructions per pipeline rank.
//
// The same lists drive the executor, the deadlock validator, the simulator and the drawings, so an
// instruction carries everything an executor needs to run it without looking anything up: the
// model stage it computes (or whose tensor it moves), the microbatch, the model chunk on this rank,
// and for point-to-point transfers the peer rank and which tensor travels.
//
// Stages. The model is cut into S = ranks * chunks consecutive stages. Stage s lives on rank
// s % ranks as that rank's chunk s / ranks, so with chunks > 1 each rank holds non-consecutive
// layers (Megatron's interleaved layout); with chunks = 1 stage and rank coincide.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/parallel_layout.h"

namespace tessera::pipeline {

enum class Op : std::uint8_t {
  Forward,         // run `stage` on `microbatch`; keep what backward needs
  Backward,        // full backward of `stage`: input gradient and weight gradient together
  BackwardInput,   // input-gradient half of backward (B in zero-bubble papers); sends upstream
  BackwardWeight,  // weight-gradient half (W); needs only data kept by BackwardInput
  Recompute,       // rerun the forward of `stage` from its stashed input just before backward
  Send,            // send `tensor` of `microbatch` to rank `peer`
  Recv,            // receive `tensor` of `microbatch` from rank `peer`
  OptimizerStep,   // apply accumulated gradients of this rank's `chunk`
};

// What a Send/Recv moves: an activation travels to the next stage, a gradient to the previous.
enum class Tensor : std::uint8_t { None, Activation, Gradient };

struct Instruction {
  Op op = Op::Forward;
  // Compute ops: the stage computed. Send: the stage that produced the tensor. Recv: the stage
  // that will consume it. OptimizerStep: the stage whose weights are updated.
  int stage = 0;
  int chunk = 0;        // stage / ranks: which model chunk of this rank
  int microbatch = -1;  // -1 for OptimizerStep
  Tensor tensor = Tensor::None;
  int peer = -1;  // Send/Recv: the other rank
  // Weight version read by Forward/Backward/Recompute (weight stashing, PipeDream-2BW), or the
  // version an OptimizerStep produces. Flushing schedules use version 0 for all compute and
  // produce version 1; PipeDream-2BW counts optimizer steps since training began
  // (Schedule::first_step).
  int weight_version = 0;

  bool operator==(const Instruction&) const = default;
};

bool is_compute(Op op);  // Forward, Backward*, Recompute, OptimizerStep
bool is_transfer(Op op);  // Send, Recv

// The boundary a transfer crosses: edge e connects stage e and stage e + 1. A Send and a Recv
// match when they agree on tensor, microbatch and edge and name each other as peers.
int transfer_edge(const Instruction& ins);

// The kind is part of the parallel layout (config/parallel_layout.h); these names keep the
// pipeline code and its callers short.
using config::parse_schedule_kind;
using config::schedule_name;
using config::schedule_title;
using config::ScheduleKind;

struct Schedule {
  ScheduleKind kind = ScheduleKind::GPipe;
  int ranks = 1;         // p: pipeline ranks
  int microbatches = 1;  // m: microbatches per optimizer step (per batch)
  int chunks = 1;        // v: model chunks per rank
  int steps = 1;         // optimizer steps covered by the lists (PipeDream-2BW runs several)
  // PipeDream-2BW: optimizer steps taken before the lists begin. Weight versions count optimizer
  // steps from the start of training, so lists that continue a run where an earlier one drained
  // name the same versions as one list over the whole run would (batch b always reads
  // max(0, b - 1)). Flushing kinds: 0.
  int first_step = 0;
  bool flush = true;     // synchronous: all gradients of a step are applied together
  bool split_backward = false;  // backward appears as BackwardInput + BackwardWeight
  bool recompute = false;       // a Recompute precedes each backward
  std::vector<std::vector<Instruction>> programs;  // programs[rank]: the ordered instructions

  int stages() const { return ranks * chunks; }
  int total_microbatches() const { return microbatches * steps; }
  int rank_of_stage(int stage) const { return stage % ranks; }
  int chunk_of_stage(int stage) const { return stage / ranks; }
  int stage_of(int rank, int chunk) const { return chunk * ranks + rank; }
};

// One line an engineer can read in an error message: "F s5 mb3 c1", "send act mb3 s5->s6 to r2".
std::string describe(const Instruction& ins);
std::string op_name(Op op);

}  // namespace tessera::pipeline
